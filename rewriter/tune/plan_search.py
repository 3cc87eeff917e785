"""The cheapest precision plan that meets an accuracy target (``--accuracy COS``).

Start from all-int8. Each round measures, in LiteRT with every intermediate tensor kept, the error
each op *adds* on the probe samples (1 - cosine of its output against the float file's same
tensor, or for an integer tensor the share of indices that differ, less the worst such error of
its activation inputs), promotes the ``step`` int8 ops that
add the most to 16x8, each with the producers of its inputs (an int16 input needs its producer
in 16x8; only ops the target runs in 16x8: ``allowed``), rebuilds the file
(:class:`rewriter.tune.mixed.MixedQuantizer`) and measures it on the target's own runtime
(``evaluate``: TFLite Micro for tflm, LiteRT elsewhere) on held-back data; ``step`` doubles each
round (1, 2, 4, ...). When a round meets the target, the promotions of that round are bisected
(in promotion order) for the shortest prefix that still meets it. Every plan tried is kept with
its accuracy and cost (``cost``: Vela's estimate for Ethos-U, the file size elsewhere), so the
report shows what each promotion costs. When the promotions have not reached the target (every
allowed op promoted), each whole-model file given (``whole``: e.g. the TFLite converter's 16x8
file) is measured and costed as one more candidate. When nothing reaches the target, the best
plan is returned with ``met`` False. A plan the runtime cannot run (TFLite Micro aborts on it) is
kept with its error and never chosen.

``refine`` (a move every candidate can take; e.g. :func:`rewriter.tune.rounding.moves`: int16
headroom, GPTQ weight rounding on the calibration data): each plan and whole-model file measured
is also refined (one file, or alternatives by name) and measured the same way, and the best
refined file replaces it only when its worst output is higher on the held-back data
``evaluate`` measures, which the refinement never saw; the trial says so (``refined``: kept,
the move kept, the worst output before and after, each alternative's). A refined file is
costed only when kept (the moves change scales and weights, not ops: Vela's cost is the
plan's; the kept file's own is measured). The int8 baseline the result reports is the plain one.

Each output is judged by its own criterion (:func:`rewriter.verify.metrics.reached`): a float
output by its cosine, an integer output (an arg-max index map, ids) by its index agreement (the
share of indices equal to the reference's; a cosine of class numbers means nothing). The target
is the same number for both, so ``--accuracy 0.99`` asks what the verdict asks (cosine >= 0.99,
index agreement >= 0.99 = :data:`rewriter.verify.tolerance.MIN_INDEX_AGREEMENT`); a plan meets it
when every output does, and a trial's ``worst`` is the lowest of those values. ``criteria`` (output
-> criterion) says which is which in the result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rewriter.tune.mixed import MixedQuantizer
from rewriter.verify.metrics import COSINE, INDEX_AGREEMENT, top1_agreement


@dataclass
class Trial:
    """One plan measured: the promoted scopes, accuracy per output, cost."""

    promoted: tuple[str, ...]
    accuracy: dict[str, float]           # output -> its criterion's value on held-back data
    cost: dict[str, Any]
    top1: dict[str, float] = field(default_factory=dict)  # classifiers: top-1 agreement
    label: str = ""                      # a whole-model file's name; "" for a quantizer plan
    error: str | None = None             # the runtime could not run it
    data: bytes | None = field(default=None, repr=False)  # a whole-model or refined file
    #: ``refine`` tried on this plan: {"kept", "before", "after"} (worst outputs)
    refined: dict[str, Any] | None = None
    base: Trial | None = field(default=None, repr=False)  # the plan before a kept refinement

    @property
    def worst(self) -> float:
        return min(self.accuracy.values()) if self.accuracy else 0.0

    def to_json(self) -> dict[str, Any]:
        out = {"promoted": len(self.promoted), "accuracy": self.accuracy, "top1": self.top1,
               "cost": self.cost}
        if self.label:
            out["label"] = self.label
        if self.error:
            out["error"] = self.error
        if self.refined:
            out["refined"] = self.refined
        return out


@dataclass
class SearchResult:
    target: float
    met: bool
    best: Trial
    int8: Trial
    trials: list[Trial]
    layers: list[dict[str, Any]]   # every op: index, op, scope, precision, added int8 error
    #: output -> what its accuracy is (``cosine`` or ``index agreement``); absent: cosine
    criteria: dict[str, str] = field(default_factory=dict)

    def criterion(self, output: str) -> str:
        return self.criteria.get(output, COSINE)

    def outputs(self) -> dict[str, dict[str, Any]]:
        """Per output: the criterion, the target, what the int8 file and the plan reached, and
        whether the plan meets the target there."""
        out = {}
        for name in self.best.accuracy or self.int8.accuracy:
            got = self.best.accuracy.get(name)
            out[name] = {"criterion": self.criterion(name), "target": self.target,
                         "int8": self.int8.accuracy.get(name), "plan": got,
                         "met": got is not None and got >= self.target}
        return out

    def to_json(self) -> dict[str, Any]:
        return {"accuracy_target": self.target, "met": self.met, "outputs": self.outputs(),
                "plan": self.best.to_json(), "int8": self.int8.to_json(),
                "trials": [t.to_json() for t in self.trials], "layers": self.layers}


def cosine(r: np.ndarray, t: np.ndarray) -> float:
    r, t = np.asarray(r, np.float64).ravel(), np.asarray(t, np.float64).ravel()
    nr, nt = float(np.linalg.norm(r)), float(np.linalg.norm(t))
    if nr == 0 or nt == 0:
        return 1.0 if nr == nt else 0.0
    return float(r @ t / (nr * nt))


def criteria(sample: Mapping[str, np.ndarray]) -> dict[str, str]:
    """Output -> what it is judged by (module docstring), from one reference sample's dtypes."""
    return {name: INDEX_AGREEMENT if np.issubdtype(np.asarray(v).dtype, np.integer) else COSINE
            for name, v in sample.items()}


def accuracy(ref: Sequence[Mapping[str, np.ndarray]], test: Sequence[Mapping[str, np.ndarray]]
             ) -> tuple[dict[str, float], dict[str, float]]:
    """Per output over every sample, its criterion's value (:func:`criteria`): cosine, or for an
    integer output the share of equal indices (a float test value read as round(value)); top-1
    agreement for classifier outputs (the one definition,
    :func:`rewriter.verify.metrics.top1_agreement`)."""
    cos, top1 = {}, {}
    judged = criteria(ref[0])
    for name in ref[0]:
        r = np.stack([np.asarray(s[name]) for s in ref])
        t = np.stack([np.asarray(s[name]) for s in test])
        if judged[name] == INDEX_AGREEMENT:
            cos[name] = float(np.mean(r == np.rint(t).reshape(r.shape))) if r.size else 1.0
            continue
        cos[name] = cosine(r, t)
        agree = top1_agreement(r, t)
        if agree is not None:
            top1[name] = agree
    return cos, top1


def added_errors(float_path: str, quant: bytes, probe: Sequence[Mapping[str, np.ndarray]],
                 ops: Sequence[Any]) -> dict[str, float]:
    """scope -> the error the op adds in ``quant`` (see the module docstring), over ``probe``."""
    import tempfile
    from pathlib import Path

    from rewriter.verify.int8_layers import _Tensors

    with tempfile.TemporaryDirectory(prefix="rewriter-plan-") as tmp:
        qpath = Path(tmp) / "q.tflite"
        qpath.write_bytes(quant)
        f, q = _Tensors(float_path), _Tensors(str(qpath))
        fidx = {d["name"]: i for i, d in f.details.items()}
        qidx = {d["name"]: i for i, d in q.details.items()}
        names = sorted({n for op in ops for n in (*op.outputs, *op.inputs)
                        if n in fidx and n in qidx})
        num = {n: 0.0 for n in names}
        den_r = {n: 0.0 for n in names}
        den_t = {n: 0.0 for n in names}
        integer = {n for n in names if np.issubdtype(f.details[fidx[n]]["dtype"], np.integer)}
        differ: dict[str, list[int]] = {}  # integer tensors (ARG_MAX's): [differing, total]
        for feeds in probe:
            fv = f.run(feeds, [fidx[n] for n in names])
            qv = q.run(feeds, [qidx[n] for n in names])
            for n in names:
                r, t = fv[fidx[n]].ravel(), qv[qidx[n]].ravel()
                if r.shape != t.shape:
                    continue
                if n in integer:  # indices: the share that differs
                    d = differ.setdefault(n, [0, 0])
                    d[0] += int(np.sum(r != np.rint(t)))
                    d[1] += int(r.size)
                    continue
                num[n] += float(r @ t)
                den_r[n] += float(r @ r)
                den_t[n] += float(t @ t)
    err = {n: 1.0 - (num[n] / np.sqrt(den_r[n] * den_t[n]) if den_r[n] * den_t[n] > 0 else 1.0)
           for n in names}
    err.update({n: d / total if total else 0.0 for n, (d, total) in differ.items()})
    out = {}
    for op in ops:
        e_out = max((err[n] for n in op.outputs if n in err), default=None)
        if e_out is None:
            continue
        e_in = max((err[n] for n in op.inputs if n in err), default=0.0)
        out[op.scope] = max(0.0, e_out - e_in)
    return out


def search(mq: MixedQuantizer, evaluate: Callable[[bytes], tuple[dict[str, float],
                                                                dict[str, float]]],
           cost: Callable[[bytes], dict[str, Any]], target: float,
           probe: Sequence[Mapping[str, np.ndarray]], allowed: Callable[[str], bool],
           max_rounds: int = 12, log: Callable[[str], None] = lambda s: None,
           whole: Mapping[str, bytes] | None = None,
           criteria: Mapping[str, str] | None = None,
           refine: Callable[[bytes], bytes | Mapping[str, bytes]] | None = None
           ) -> SearchResult:
    """The cheapest plan found whose every output reaches ``target`` by its own criterion
    (``criteria``, output -> ``cosine`` or ``index agreement``, as ``evaluate`` measured it;
    module docstring)."""
    cache: dict[tuple[str, ...], Trial] = {}
    order: list[str] = []   # promotion order

    def judge(key: tuple[str, ...], data: bytes, label: str = "") -> Trial:
        trial = judge_once(key, data, label)
        if refine is None or trial.error is not None:
            return trial
        try:
            options = refine(data)
        except Exception as exc:  # the move is skipped, the plan stands
            log(f"refine failed: {type(exc).__name__}: {str(exc).splitlines()[:1]}")
            return trial
        if isinstance(options, (bytes, bytearray)):
            options = {"refined": bytes(options)}
        chosen, tried = trial, {}
        for move, better in options.items():
            if better == data:
                continue
            # costed once kept: the moves change values (scales, weights), not the ops
            other = judge_once(key, better, f"{label} {move}".strip(), trial.cost)
            tried[move] = None if other.error else other.worst
            if other.error is None and other.worst > chosen.worst:
                chosen, kept_move, kept_data = other, move, better
        if not tried:
            return trial
        info = {"kept": chosen is not trial, "before": trial.worst,
                "after": max((v for v in tried.values() if v is not None), default=None),
                "tried": tried}
        if chosen is trial:
            trial.refined = info
            return trial
        info.update(move=kept_move, after=chosen.worst)
        chosen.cost = cost(kept_data)
        chosen.label, chosen.data, chosen.refined, chosen.base = label, kept_data, info, trial
        return chosen

    def judge_once(key: tuple[str, ...], data: bytes, label: str = "",
                   costed: dict[str, Any] | None = None) -> Trial:
        """One file measured; ``costed``: the cost to show instead of measuring it."""
        spent = costed if costed is not None else cost(data)
        try:
            acc, top1 = evaluate(data)
        except Exception as exc:  # e.g. TFLite Micro aborted: kept as a trial, never chosen
            line = (str(exc).strip().splitlines() or [type(exc).__name__])[-1][:300]
            trial = Trial(key, {}, spent, {}, label, f"{type(exc).__name__}: {line}")
        else:
            trial = Trial(key, acc, spent, top1, label)
        log(f"{label or f'{len(key)} op(s) in 16x8'}: "
            + (f"failed: {trial.error}" if trial.error else f"worst output {trial.worst:.5f}")
            + ("" if costed is not None else f" cost {trial.cost}"))
        return trial

    def measure(promoted: Sequence[str]) -> tuple[Trial, bytes]:
        key = tuple(promoted)
        data = mq.build({s: "16x8" for s in key})
        if key not in cache:
            cache[key] = judge(key, data)
        return cache[key], data

    int8, data = measure(())
    trials = [int8]
    best, met = int8, int8.worst >= target
    candidates = [op.scope for op in mq.ops if allowed(op.op)]
    allowed_scopes = set(candidates)
    made_by = {t: op.scope for op in mq.ops for t in op.outputs}
    producers = {op.scope: [made_by[t] for t in op.inputs if t in made_by] for op in mq.ops}
    step = 1
    errs: dict[str, float] = {}
    for _ in range(max_rounds):
        if met or len(order) >= len(candidates):
            break
        try:
            errs = added_errors(str(mq.float_path), data, probe, mq.ops)
        except Exception:  # LiteRT cannot load this plan (MobileNetV3Large with 95 ops in 16x8:
            pass           # its int16 ADD's input shift): rank by the last plan it could
        left = sorted((s for s in candidates if s not in order),
                      key=lambda s: -errs.get(s, 0.0))
        before = len(order)
        for scope in left[:step]:
            # An op's int16 input needs its producer in 16x8 too (else the producer writes the
            # starved int8 tensor and a QUANTIZE only widens it): promote the pair.
            for s in (*producers.get(scope, ()), scope):
                if s not in order and s in allowed_scopes:
                    order.append(s)
        trial, data = measure(order)
        trials.append(trial)
        if trial.worst > best.worst or trial.worst >= target:
            best = trial
        if trial.worst >= target:
            met = True
            lo, hi = before, len(order)   # lo fails, hi meets
            while hi - lo > 1:
                mid = (lo + hi) // 2
                t, _ = measure(order[:mid])
                trials.append(t)
                if t.worst >= target:
                    hi, best = mid, t
                else:
                    lo = mid
        step *= 2
    for label, data in (whole or {}).items():
        if met:
            break
        trial = judge(tuple(op.scope for op in mq.ops), data, label)
        trial.data = trial.data if trial.data is not None else data
        trials.append(trial)
        if trial.error is None and (trial.worst > best.worst or trial.worst >= target):
            best, met = trial, trial.worst >= target
    layers = [{"index": op.index, "op": op.op, "scope": op.scope,
               "precision": "16x8" if op.scope in best.promoted else "int8"} for op in mq.ops]
    return SearchResult(target, met, best, int8.base or int8, trials, layers,
                        dict(criteria or {}))
