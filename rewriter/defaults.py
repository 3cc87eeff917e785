"""Defaults every command shares, each written once: quantisation modes, the ONNX opset, and how
many samples calibrate and verify a model (and with which seeds, when the data is synthetic).

``rewrite run`` and ``rewrite check`` export with the same calibration because both take it from
here; tolerances live in :mod:`rewriter.verify.tolerance`.
"""

from __future__ import annotations

#: TFLite quantisation modes (``--quantize``): full-integer int8; ``16x8``, int16 activations
#: with int8 weights (the converter's EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8,
#: on targets whose table has an ``[int16]`` section); float16 weights; or float32.
QUANTIZE_MODES = ("int8", "16x8", "float16", "none")
#: The modes whose converter calibrates activation ranges on samples (integer activations).
INTEGER_MODES = ("int8", "16x8")
#: ONNX opset of ONNX targets when neither ``--opset`` nor the table's ``default_opset`` says.
DEFAULT_OPSET = 17
#: int8 calibration samples drawn (seeded, synthetic) when the user gives no data.
CALIBRATION_SAMPLES = 32
#: At most this many of the user's samples calibrate (``--calibration-samples`` lowers it): every
#: sample given is used up to here, as the plain converter uses every sample it is given. TFLite's
#: documentation asks for "a few hundred"; 500 samples of a 224x224x3 float image are 300 MB.
CALIBRATION_CAP = 500
#: Seed of synthetic calibration samples (verification uses :data:`VERIFY_SEED`, so the two
#: sets differ).
CALIBRATION_SEED = 1
#: Verification samples of the job (``rewrite run --samples``). When the user gives one set of
#: data, this many (at most a quarter of it, at least one) are held back from calibration and
#: the verdict rests on them (:func:`rewriter.job.stages.job_data`).
VERIFY_SAMPLES = 8
#: With ``--data`` (data the calibration never sees), every sample given up to this many is
#: verified on (``--samples`` sets another number): the verdict and ``--recover``'s keep-or-drop
#: rest on the user's own held-back set, not on 8 of it.
DATA_SAMPLES = 32
#: Seed of synthetic verification samples.
VERIFY_SEED = 0
#: Fine-tuning epochs of ``--recover``.
RECOVER_EPOCHS = 20
#: Largest magnitude the int8 quantizer is given in weights or calibration data (measured limits:
#: :mod:`rewriter.export.validate`); ``check`` predicts the crash beyond it.
QUANTIZER_MAX_ABS = 1e30
