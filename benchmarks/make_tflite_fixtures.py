"""Write the small Keras-application ``.tflite`` files the tests import (tests/data/tflite/), random weights.

TensorFlow 2.21's converter writes, from Keras applications, operator patterns
TVM's Relax TFLite frontend does not take as they are: a ``RESHAPE`` whose new
shape is computed at run time (``SHAPE`` -> ``STRIDED_SLICE`` -> ``PACK``), for
one (issue 53). These files are what the converter writes for each family, made
small enough to keep in the repository (each under 200 KB) and to build in
seconds. Run once, with TensorFlow in its own venv (its pins conflict with TVM's)::

  python -m venv /tmp/tfenv && /tmp/tfenv/bin/pip install tensorflow-cpu==2.21.0
  /tmp/tfenv/bin/python benchmarks/make_tflite_fixtures.py tests/data/tflite

Every model: ``weights=None`` (random weights, seed 0, no downloads), 10 classes,
``classifier_activation=None`` (so outputs are not a near-uniform softmax), a
32x32x3 input (64x64 where said), converted with ``TFLiteConverter.from_keras_model``
and no other options, as a user converts; each file is byte-identical run to run, with or without
``--only`` and ``--check-operators``.
How each differs from the real model: narrower, with the same operators, each as many times as
the real model at this input size has them (``--check-operators`` converts the unpatched model and
compares), except NASNet (fewer cells):

- ``mobilenet``: ``MobileNet(alpha=0.1)`` (the real one: alpha 1.0). Holds the computed-shape RESHAPE
  (its classifier's ``Reshape``).
- ``mobilenet_v2``: ``MobileNetV2(alpha=0.1)``, its channel rounding (``_make_divisible``) to multiples of 2,
  not 8, and its 1280-filter last convolution divided by 32 (40 filters).
- ``mobilenet_v3_small``: ``MobileNetV3Small(alpha=0.1)``, its channel rounding (``_depth``) to multiples of 2,
  not 8, and its 1024-filter head convolution divided by 32. ``mobilenet_v3_large``:
  ``MobileNetV3Large(alpha=0.05)`` and its 1280-filter head convolution divided by 32. Both hold the
  computed-shape RESHAPE (the head's ``Flatten``).
- ``efficientnet_b0``: Keras' ``EfficientNet`` builder with B0's depth coefficient (1.0), resolution, dropout and
  blocks, but ``width_coefficient=0.055`` and ``depth_divisor=1`` (B0: 1.0 and 8). Holds 16 computed-shape
  RESHAPEs (each squeeze-excite block's ``Reshape``).
- ``resnet50`` / ``densenet121``: ``ResNet50`` / ``DenseNet121`` as Keras builds them, with every ``Conv2D``'s
  filter count divided by 32 / 16 (at least 1) while the model is built (``_narrow_convolutions``).
  DenseNet's transition layers size themselves from the (already narrowed) input, so they are divided
  twice; DenseNet takes a 64x64 input (at 32x32 its random-weight output is all zeros).
- ``nasnet_mobile``: Keras' ``NASNet`` builder with NASNetMobile's arguments except ``num_blocks=1``,
  ``penultimate_filters=96`` and ``stem_block_filters=4`` (NASNetMobile: 4, 1056 and 32): one normal
  cell per stage instead of four, the same cell and reduction-cell operators.
- ``mobilenet_v3_small_int8``: ``mobilenet_v3_small`` converted full-integer (``Optimize.DEFAULT``, int8
  built-ins only, int8 input and output, calibrated on 8 seeded random inputs): the int8 model holds the
  same computed-shape RESHAPE, its SHAPE reading a quantized tensor.
- ``mobilenet_int8`` / ``mobilenet_v2_int8``: ``mobilenet`` / ``mobilenet_v2`` converted full-integer the same way
  (issue 54: integer convolutions, depthwise ones, per-channel weights, ReLU6 bounds), after
  ``_well_conditioned``: Keras' random initialization shrinks these narrow networks' activations to about 1e-15
  at the output, where an int8 output is one constant and says nothing.
- ``kws_int8``: a keyword-spotting CNN of the size that runs on microcontrollers (not a Keras application; no
  unpatched model to compare operators with): a 49x10x1 MFCC input, a 10x4 stride-2 convolution, a 3x3 one, a
  depthwise 3x3 one, a 1x1 one with ReLU6, a 3x3 stride-2 one without padding, each with its bias and ReLU, a max
  pool, a dense ReLU layer and a dense classifier of 12 keywords; converted full-integer as above, also
  ``_well_conditioned``.
- ``conv_relu_int8``: one 3x3 convolution with its bias and ReLU on a 12x12x8 input (16 filters, per-channel
  int8 weights), converted full-integer as above and ``_well_conditioned``: the smallest integer kernel.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

CLASSES = 10
RES = 32


@contextlib.contextmanager
def _narrow_convolutions(divisor: int, at_least: int = 1) -> Iterator[None]:
    """While building, each ``Conv2D`` asked for ``at_least`` filters or more gets ``filters // divisor`` (at least 1)."""
    from keras.src import layers

    original = layers.Conv2D

    class NarrowConv2D(original):  # type: ignore[misc, valid-type]
        def __init__(self, filters: int, *args: Any, **kwargs: Any) -> None:
            super().__init__(max(1, filters // divisor) if filters >= at_least else filters, *args, **kwargs)

    layers.Conv2D = NarrowConv2D
    try:
        yield
    finally:
        layers.Conv2D = original


@contextlib.contextmanager
def _round_channels_to(module: Any, function: str, divisor: int) -> Iterator[None]:
    """While building, ``module.function`` (MobileNet's channel rounding) rounds to ``divisor``, not 8."""
    original = getattr(module, function)

    def rounded(v: float, _divisor: int = 8, min_value: int | None = None) -> int:
        return original(v, divisor, min_value)

    setattr(module, function, rounded)
    try:
        yield
    finally:
        setattr(module, function, original)


def _well_conditioned(network: Any, seed: int = 0) -> Any:
    """``network`` with weights that keep activations at unit scale layer after layer, biases and batch norms not trivial.

    He-normal kernels (a depthwise kernel's fan-in is its window), biases N(0, 0.1), batch norms with random
    statistics: the folded biases are not zero, and an int8 model's output spans its range instead of one value.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    for layer in network.layers:
        kind = type(layer).__name__
        values = list(layer.get_weights())
        if not values:
            continue
        if kind == "BatchNormalization":
            gamma, beta, mean, var = (np.asarray(v) for v in values)
            values = [rng.uniform(0.5, 1.5, gamma.shape), rng.normal(0, 0.1, beta.shape), rng.normal(0, 0.1, mean.shape),
                      rng.uniform(0.5, 1.5, var.shape)]
        elif kind in ("Conv2D", "DepthwiseConv2D", "Dense"):
            kernel = values[0]
            fan_in = int(np.prod(kernel.shape[:2])) if kind == "DepthwiseConv2D" else int(np.prod(kernel.shape[:-1]))
            values[0] = rng.normal(0, (2.0 / fan_in) ** 0.5, kernel.shape)
            if len(values) > 1:
                values[1] = rng.normal(0, 0.1, values[1].shape)
        layer.set_weights([np.asarray(v, dtype=np.float32) for v in values])
    return network


def _common(res: int = RES) -> dict[str, Any]:
    return {"weights": None, "input_shape": (res, res, 3), "classes": CLASSES, "classifier_activation": None}


def _mobilenet() -> Any:
    import keras

    return keras.applications.MobileNet(alpha=0.1, **_common())


def _mobilenet_v2() -> Any:
    import keras
    from keras.src.applications import mobilenet_v2

    with _round_channels_to(mobilenet_v2, "_make_divisible", 2), _narrow_convolutions(32, at_least=1024):
        return keras.applications.MobileNetV2(alpha=0.1, **_common())


def _mobilenet_v3(large: bool) -> Any:
    import keras
    from keras.src.applications import mobilenet_v3

    if large:  # alpha 0.05 keeps every residual add without a finer rounding; with it one vanishes
        with _narrow_convolutions(32, at_least=1024):
            return keras.applications.MobileNetV3Large(alpha=0.05, **_common())
    with _round_channels_to(mobilenet_v3, "_depth", 2), _narrow_convolutions(32, at_least=1024):
        return keras.applications.MobileNetV3Small(alpha=0.1, **_common())


def _efficientnet_b0() -> Any:
    from keras.src.applications.efficientnet import EfficientNet

    return EfficientNet(0.055, 1.0, 224, dropout_rate=0.2, depth_divisor=1, name="efficientnetb0", **_common())


def _kws_cnn() -> Any:
    """A keyword-spotting CNN (conv + bias + ReLU layers, a dense classifier), as TinyML benchmarks size them."""
    import keras
    from keras import layers

    return keras.Sequential([
        keras.Input((49, 10, 1)),
        layers.Conv2D(16, (10, 4), strides=(2, 2), padding="same", activation="relu"),
        layers.Conv2D(16, 3, padding="same", activation="relu"),
        layers.DepthwiseConv2D(3, padding="same", activation="relu"),
        layers.Conv2D(24, 1),
        layers.ReLU(6.0),
        layers.Conv2D(24, 3, strides=(2, 2), activation="relu"),
        layers.MaxPooling2D((2, 1)),
        layers.Flatten(),
        layers.Dense(32, activation="relu"),
        layers.Dense(12),
    ], name="kws_cnn")


def _conv_relu() -> Any:
    import keras
    from keras import layers

    return keras.Sequential([keras.Input((12, 12, 8)), layers.Conv2D(16, 3, padding="same", activation="relu")],
                            name="conv_relu")


def _resnet50() -> Any:
    import keras

    with _narrow_convolutions(32):
        return keras.applications.ResNet50(**_common())


def _densenet121() -> Any:
    import keras

    with _narrow_convolutions(16):
        return keras.applications.DenseNet121(**_common(64))


def _nasnet_mobile() -> Any:
    from keras.src.applications.nasnet import NASNet

    return NASNet(penultimate_filters=96, num_blocks=1, stem_block_filters=4, skip_reduction=False,
                  default_size=224, name="nasnet_mobile", **_common())


FIXTURES: dict[str, Callable[[], Any]] = {
    "mobilenet": _mobilenet,
    "mobilenet_v2": _mobilenet_v2,
    "mobilenet_v3_small": lambda: _mobilenet_v3(large=False),
    "mobilenet_v3_large": lambda: _mobilenet_v3(large=True),
    "efficientnet_b0": _efficientnet_b0,
    "resnet50": _resnet50,
    "densenet121": _densenet121,
    "nasnet_mobile": _nasnet_mobile,
    "mobilenet_v3_small_int8": lambda: _mobilenet_v3(large=False),
    "mobilenet_int8": lambda: _well_conditioned(_mobilenet()),
    "mobilenet_v2_int8": lambda: _well_conditioned(_mobilenet_v2()),
    "kws_int8": lambda: _well_conditioned(_kws_cnn()),
    "conv_relu_int8": lambda: _well_conditioned(_conv_relu()),
}
#: fixtures converted full-integer (int8 weights, activations, input and output), as for an integer-only NPU/CPU path
QUANTIZED = {"mobilenet_v3_small_int8", "mobilenet_int8", "mobilenet_v2_int8", "kws_int8", "conv_relu_int8"}


#: the unpatched Keras application of each fixture, and its input size, for ``--check-operators``
REAL_MODELS = {"mobilenet": ("MobileNet", RES), "mobilenet_v2": ("MobileNetV2", RES),
               "mobilenet_v3_small": ("MobileNetV3Small", RES), "mobilenet_v3_large": ("MobileNetV3Large", RES),
               "efficientnet_b0": ("EfficientNetB0", RES), "resnet50": ("ResNet50", RES),
               "densenet121": ("DenseNet121", 64), "nasnet_mobile": ("NASNetMobile", RES),
               "mobilenet_v3_small_int8": ("MobileNetV3Small", RES), "mobilenet_int8": ("MobileNet", RES),
               "mobilenet_v2_int8": ("MobileNetV2", RES)}


def _convert(network: Any, quantized: bool = False) -> bytes:
    """The converter's defaults; ``quantized``: full-integer, calibrated on 8 seeded standard-normal inputs."""
    import numpy as np
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_keras_model(network)
    if quantized:
        shape = (1, *network.input_shape[1:])
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: (
            [np.random.default_rng(seed).standard_normal(shape).astype(np.float32)] for seed in range(8)
        )
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    with contextlib.redirect_stdout(io.StringIO()):  # the converter prints every captured variable
        return converter.convert()


def _operator_counts(data: bytes) -> Counter[str]:
    from tensorflow.lite.python import schema_py_generated as schema

    names = {code: name for name, code in vars(schema.BuiltinOperator).items() if name.isupper()}
    model = schema.Model.GetRootAsModel(data, 0)
    graph = model.Subgraphs(0)
    counts: Counter[str] = Counter()
    for index in range(graph.OperatorsLength()):
        code = model.OperatorCodes(graph.Operators(index).OpcodeIndex())
        counts[names[max(code.BuiltinCode(), code.DeprecatedBuiltinCode())]] += 1
    return counts


def _check_operators(name: str, data: bytes) -> str:
    """How the fixture's operator counts differ from the unpatched model's ("same operators" when they do not)."""
    import keras

    application, res = REAL_MODELS[name]
    real = _operator_counts(_convert(getattr(keras.applications, application)(**_common(res)), name in QUANTIZED))
    fixture = _operator_counts(data)
    if real == fixture:
        return "same operators as the real model"
    return f"the real model has more {dict(real - fixture)}, fewer {dict(fixture - real)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="directory to write NAME.tflite into")
    parser.add_argument("--only", nargs="*", choices=sorted(FIXTURES), help="these fixtures only")
    parser.add_argument("--check-operators", action="store_true",
                        help="also convert the unpatched model and compare operator counts (slower)")
    args = parser.parse_args()
    import tensorflow as tf

    args.out.mkdir(parents=True, exist_ok=True)
    for name in args.only or FIXTURES:
        tf.keras.backend.clear_session()  # layer and tensor names restart: a file does not depend on what ran before
        tf.keras.utils.set_random_seed(0)
        network = FIXTURES[name]()
        data = _convert(network, name in QUANTIZED)
        path = args.out / f"{name}.tflite"
        path.write_bytes(data)
        print(f"{path}: {len(data) / 1e3:.0f} KB, {network.count_params()} parameters")
        if args.check_operators and name in REAL_MODELS:
            print(f"  {_check_operators(name, data)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
