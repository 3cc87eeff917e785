"""``rewrite batch --ray ADDRESS``: the same jobs as Ray tasks (``pip install rewriter[ray]``).

Each job is one task running :func:`rewriter.batch.local.run_one` (so a job is the same
``rewrite run`` process as on this machine, crash isolation included) with a request of
``cpus_per_job`` CPUs and ``job_memory_mb`` of memory, so Ray's scheduler places as many on a
node as it has cores and memory for. ``ADDRESS`` is a cluster's address (``ray start --head``
prints it), ``auto`` (the cluster this machine belongs to) or ``local`` (start a Ray instance
for this batch alone and stop it at the end). The batch directory, the manifest and the models
must be at the same paths on every node (a shared file system); the task reads the report where
the job wrote it. Tasks are not retried (a job that failed has its exit code and log); an
interrupt cancels the tasks, which stop their jobs (SIGINT, as on this machine).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rewriter.errors import UserError


def _task(spec: dict[str, Any]) -> dict[str, Any]:
    from rewriter.batch.local import run_one

    return run_one(spec)


class RayPool:
    """Jobs as Ray tasks with CPU and memory requests."""

    def __init__(self, address: str, job_memory_mb: float, cpus_per_job: float = 1.0) -> None:
        self.address = address
        self.job_memory_mb = job_memory_mb
        self.cpus_per_job = cpus_per_job

    def run(self, specs: list[dict[str, Any]],
            on_done: Callable[[dict[str, Any], dict[str, Any]], None]) -> None:
        if self.address == "local":  # this machine only: Ray on the loopback address
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        try:
            import ray
        except ImportError:
            raise UserError("--ray needs Ray: pip install 'rewriter[ray]'") from None
        root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        kwargs: dict[str, Any] = {"runtime_env": {"env_vars": {"PYTHONPATH": path}},
                                  "log_to_driver": False, "logging_level": "ERROR"}
        if self.address == "local":
            kwargs.update(include_dashboard=False, _node_ip_address="127.0.0.1")
        else:
            kwargs["address"] = self.address
        try:
            ray.init(**kwargs)
        except ConnectionError as exc:
            raise UserError(f"--ray {self.address}: cannot connect to a Ray cluster ({exc}); "
                            "start one with `ray start --head`, or use --ray local") from None
        try:
            self._run(ray, specs, on_done)
        finally:
            ray.shutdown()

    def _run(self, ray: Any, specs: list[dict[str, Any]],
             on_done: Callable[[dict[str, Any], dict[str, Any]], None]) -> None:
        remote = ray.remote(_task).options(
            num_cpus=self.cpus_per_job, memory=int(self.job_memory_mb * 1e6), max_retries=0)
        refs = {remote.remote(spec): spec for spec in specs}
        todo = list(refs)
        try:
            while todo:
                done, todo = ray.wait(todo, num_returns=1, timeout=0.5)
                for ref in done:
                    on_done(refs[ref], _result(ray, ref))
        except KeyboardInterrupt:
            for ref in todo:
                ray.cancel(ref)
            for ref in todo:
                res = _result(ray, ref)
                if res.get("cancelled"):
                    continue
                res["interrupted"] = True
                on_done(refs[ref], res)
            raise


def _result(ray: Any, ref: Any) -> dict[str, Any]:
    """The task's result, or a failed job's record when the task itself failed."""
    try:
        return ray.get(ref)
    except ray.exceptions.TaskCancelledError:
        return {"cancelled": True}
    except ray.exceptions.RayError as exc:
        return {"exit_code": 3, "ok": False, "seconds": 0.0, "peak_rss_mb": 0.0,
                "peak_rss_hwm_mb": 0.0, "peak_mem_mb": 0.0, "summary": "", "report_sha256": "",
                "error": f"internal error: the Ray task failed: {str(exc).splitlines()[0][:300]}"}
