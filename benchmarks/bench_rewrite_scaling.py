"""Time planning + rewriting a Conv2D -> FusedBatchNormV3 -> Elu chain at growing sizes.

Prints nodes, wall and CPU seconds, CPU microseconds per node for each size, and the per-node
CPU-time ratio of each size to the smallest: flat ratios (~1) mean matching and rewriting scale
linearly (CPU time, because the machine is shared and wall time is noisy).

    PYTHONPATH=. python benchmarks/bench_rewrite_scaling.py [blocks ...]
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from rewriter.rewrite.planner import apply, plan  # noqa: E402
from rewriter.testing import (
    conv_bn_elu_chain,  # noqa: E402
    toy_target,  # noqa: E402
)


def chain_target() -> object:
    """An ONNX op table running Conv, Add, Mul, Sub, Relu, Exp, ... but neither
    BatchNormalization nor Elu, so both rules are planned."""
    return toy_target({"Conv2D", "BiasAdd", "AddV2", "Mul", "Sub", "Relu", "Exp", "Maximum",
                       "Minimum"}, artifact="onnx", name="chain-bench")


def measure(blocks: int) -> tuple[int, float, float]:
    """(nodes, wall seconds, CPU seconds of this process) for plan + apply."""
    model = conv_bn_elu_chain(blocks)
    start, cpu = time.perf_counter(), time.process_time()
    result = apply(model, plan(model, chain_target(), "none"))
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert len(result.applied) == 2 * blocks, result.rule_counts()
    return len(model.graph_def.node), elapsed, cpu


def main(sizes: list[int]) -> None:
    base = None
    print(f"{'blocks':>7} {'nodes':>7} {'wall s':>7} {'cpu s':>7} {'cpu us/node':>12} "
          f"{'ratio':>6}")
    for blocks in sizes:
        nodes, secs, cpu = measure(blocks)
        per = cpu / nodes * 1e6
        base = base or per
        print(f"{blocks:>7} {nodes:>7} {secs:>7.2f} {cpu:>7.2f} {per:>12.1f} {per / base:>6.2f}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [500, 1000, 2500, 5000])
