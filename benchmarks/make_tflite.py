"""Write Keras application models as float32 ``.tflite`` files, random weights (no downloads).

For the LiteRT rows of ``vs_onnxruntime.py`` and ``baseline_fairness.py``
(issue 29): the models a TensorFlow user deploys with LiteRT, converted as they
would convert them (``TFLiteConverter.from_keras_model``). It needs TensorFlow,
which edgetune does not depend on (its pins of protobuf and numpy differ from
TVM's): run it with a separate interpreter, e.g.::

  python -m venv /tmp/tfenv && /tmp/tfenv/bin/pip install tensorflow-cpu==2.21.0
  /tmp/tfenv/bin/python benchmarks/make_tflite.py mobilenet_v2 --res 224 --out edgetune-out/tflite/mobilenet_v2-224.tflite

The classifier's softmax is left out (``classifier_activation=None``): with
random weights its output is nearly uniform, so outputs would agree trivially.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

MODELS = {
    "mobilenet": "MobileNet", "mobilenet_v2": "MobileNetV2", "mobilenet_v3_small": "MobileNetV3Small",
    "mobilenet_v3_large": "MobileNetV3Large", "efficientnet_b0": "EfficientNetB0", "resnet50": "ResNet50",
    "densenet121": "DenseNet121", "nasnet_mobile": "NASNetMobile",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("--res", type=int, default=224)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--int8", action="store_true",
                        help="full-integer post-training quantization (int8 in and out), calibrated on 8 random inputs")
    args = parser.parse_args()
    import tensorflow as tf

    tf.keras.utils.set_random_seed(args.seed)
    network = getattr(tf.keras.applications, MODELS[args.model])(
        weights=None, input_shape=(args.res, args.res, 3), classes=1000, classifier_activation=None
    )
    converter = tf.lite.TFLiteConverter.from_keras_model(network)
    if args.int8:
        import numpy as np

        rng = np.random.default_rng(args.seed)

        def calibration():
            for _ in range(8):
                yield [rng.uniform(-1, 1, (1, args.res, args.res, 3)).astype("float32")]

        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = calibration
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = converter.inference_output_type = tf.int8
    data = converter.convert()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)
    print(f"{args.out}: {len(data) / 1e6:.1f} MB, {network.count_params()} parameters")
    return 0


if __name__ == "__main__":
    sys.exit(main())
