"""The typed results of a job: what ``report.json`` is built from.

:func:`rewriter.job.pipeline.run_job` fills a :class:`Job` stage by stage (:mod:`rewriter.job.stages`);
:func:`rewriter.report.build.build_report` reads it once, at the end. Both import these types from
here, so neither imports the other's module for them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rewriter.export.micro import Package
from rewriter.ir.model import Model
from rewriter.job.stages import ArtifactRun, Deployment, JobData
from rewriter.rewrite.passes import RewriteResult
from rewriter.rewrite.planner import Plan
from rewriter.targets import GraphCheck, Target
from rewriter.tune.recover import Recovery
from rewriter.verify.divergence import Divergence
from rewriter.verify.int8_layers import Int8Layers
from rewriter.verify.metrics import Comparison
from rewriter.verify.per_rule import RuleCheck

__all__ = ["Attempt", "Diagnostics", "Job", "Retry"]


@dataclass
class Diagnostics:
    """What explains a mismatch: |error| histograms per stage and output, the first diverging
    node, (opt-in) a comparison after every rule, and the original's measured response to the
    approximate applications' bounds (:mod:`rewriter.verify.bound_response`)."""

    histograms: dict[str, dict[str, Any]]
    divergence: Divergence | None = None
    per_rule: list[RuleCheck] | None = None
    bound_response: Any = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"histograms": self.histograms}
        if self.divergence is not None:
            out["divergence"] = self.divergence.to_json()
        if self.per_rule is not None:
            out["per_rule"] = [c.to_json() for c in self.per_rule]
        if self.bound_response is not None:
            out["bound_response"] = self.bound_response.to_json()
        return out


@dataclass
class Attempt:
    """One plan -> rewrite -> verify -> deploy -> run pass over the model.

    A job run only up to planning (``rewrite check --graph-only``) leaves everything after
    ``graph_after`` None; up to deployment (``rewrite check``) it has ``deployment`` only."""

    plan: Plan
    rewrite: RewriteResult
    graph_after: GraphCheck  # the rewritten TF graph against the table
    tf: Comparison | None = None  # rewritten TF graph vs original
    diagnostics: Diagnostics | None = None
    saved_model: str | None = None
    deployment: Deployment | None = None
    artifact: ArtifactRun | None = None
    warnings: list[str] = field(default_factory=list)
    int8_layers: Int8Layers | None = None  # int8 .tflite: each layer's error against float
    #: the warnings of the rewrite and its TF verification (the rest are the file's)
    rewrite_warnings: list[str] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        """The whole attempt ran: verified in TF, and the file run unless its export failed."""
        return self.tf is not None

    @property
    def ok(self) -> bool:
        """The file deployed runs every op; when verified, both comparisons pass too."""
        if self.deployment is None or not self.deployment.ok:
            return False
        if not self.verified:
            return True
        assert self.tf is not None
        return bool(self.tf.ok and self.artifact is not None and self.artifact.ok)


@dataclass
class Retry:
    """Why a second attempt ran without some rules, and how it ended."""

    exclude: list[str]
    because: list[str]
    reason: str
    ok: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Job:
    """Every stage's result of one job: what ``report.json`` is built from."""

    model: Model
    target: Target
    quantize: str
    before: GraphCheck  # the original TF graph against the table
    data: JobData
    attempt: Attempt
    retry: Retry | None
    timings: dict[str, float]
    recovery: Recovery | None = None  # --recover: the attempt is the fine-tuned one
    package: Package | None = None  # --deploy/--sram/--flash: memory figures (and package)
    #: The job's artifact beside the plain converter's file on the target's cost model
    #: (:func:`rewriter.targets.cost.versus`; None: no cost model for the target or no file).
    versus_plain: dict[str, Any] | None = None
    precision: Any = None  # --accuracy: rewriter.job.precision.PrecisionPlan
    #: --recover / --qat asked but not run: why (an integer output with nothing to distil)
    recover_skipped: str | None = None
    #: --accuracy, every op in 16x8: rewriter.job.approximate.ApproximationMove
    approximation: Any = None

    @property
    def ok(self) -> bool:
        """The attempt is OK and the model fits the ``--sram``/``--flash`` budgets."""
        last = self.approximation if self.approximation is not None else self.precision
        return (self.attempt.ok and not (self.package is not None and self.package.overruns())
                and (last is None or last.met))  # --accuracy: the last move taken decides

    @property
    def warnings(self) -> list[str]:
        return [*self.data.warnings, *self.attempt.warnings]
