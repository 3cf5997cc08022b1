"""PyTorch models written out in the tests (no torchvision, no downloads), exported with ``torch.export``.

:func:`resnet18` is ResNet-18's architecture (a 3x3 stem for small images, four
stages of two basic blocks, 1x1 projection shortcuts, global pooling, a linear
classifier) at a reduced width; its batch norms get random statistics so that
folding them into the convolutions is checked on real numbers. Import this
module only where torch is installed (:func:`require_torch`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import IN_CI


def require_torch() -> None:
    """Skip without torch locally, fail without it in CI (``make test`` installs edgetune[torch])."""
    try:
        import torch  # noqa: F401
    except ImportError:
        if IN_CI:
            pytest.fail("torch is not installed; it is in the torch extra (pip install -e '.[torch]')")
        pytest.skip("torch not installed (pip install -e '.[torch]')")


def resnet18(width: int = 8, classes: int = 10, seed: int = 0):
    import torch
    from torch import nn

    def norm(channels: int) -> nn.BatchNorm2d:
        bn = nn.BatchNorm2d(channels)
        with torch.no_grad():
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.2, 0.2)
            bn.running_mean.uniform_(-0.2, 0.2)
            bn.running_var.uniform_(0.5, 2.0)
        return bn

    class BasicBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = norm(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = norm(cout)
            self.shortcut = nn.Sequential()
            if stride != 1 or cin != cout:
                self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), norm(cout))

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(y)) + self.shortcut(x))

    class ResNet18(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), norm(width), nn.ReLU())
            blocks, cin = [], width
            for stage, cout in enumerate((width, 2 * width, 4 * width, 8 * width)):
                blocks += [BasicBlock(cin, cout, 1 if stage == 0 else 2), BasicBlock(cout, cout, 1)]
                cin = cout
            self.blocks = nn.Sequential(*blocks)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, classes)

        def forward(self, x):
            return self.fc(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))

    torch.manual_seed(seed)
    return ResNet18().eval()


def export(module, *shapes: tuple[int, ...]):
    """``torch.export.export`` of an eval-mode module on random inputs of these shapes."""
    import torch

    return torch.export.export(module, tuple(torch.randn(*shape) for shape in shapes))


def export_resnet18(path: Path, resolution: int = 32):
    """The reduced ResNet-18 exported at ``resolution`` and saved to ``path``; returns (module, program)."""
    import torch

    module = resnet18()
    program = export(module, (1, 3, resolution, resolution))
    torch.export.save(program, path)
    return module, program


def torch_reference(module, inputs: list) -> list:
    """The eager module's outputs on numpy inputs, as numpy arrays."""
    import torch

    with torch.no_grad():
        out = module(*(torch.from_numpy(x) for x in inputs))
    return [t.numpy() for t in (out if isinstance(out, (tuple, list)) else (out,))]


def squeezenet1_1(classes: int = 1000, seed: int = 0):
    """torchvision's SqueezeNet 1.1 as torchvision defines it (``models/squeezenet.py``): ceil-mode max pools, so
    its feature maps are 55/27/13 at 224, Fire modules, dropout and a 1x1-conv classifier; eval mode, random weights.

    Its ONNX export has the workloads of ``torchvision.models.squeezenet1_1``'s export (same layers, same order):
    the schedule library's real-export entries are checked on it without torchvision, whose compiled operators
    do not load against the CPU-only torch the project pins.
    """
    import torch
    from torch import nn

    class Fire(nn.Module):
        def __init__(self, inplanes: int, squeeze: int, expand1x1: int, expand3x3: int) -> None:
            super().__init__()
            self.squeeze = nn.Conv2d(inplanes, squeeze, kernel_size=1)
            self.squeeze_activation = nn.ReLU(inplace=True)
            self.expand1x1 = nn.Conv2d(squeeze, expand1x1, kernel_size=1)
            self.expand1x1_activation = nn.ReLU(inplace=True)
            self.expand3x3 = nn.Conv2d(squeeze, expand3x3, kernel_size=3, padding=1)
            self.expand3x3_activation = nn.ReLU(inplace=True)

        def forward(self, x):
            x = self.squeeze_activation(self.squeeze(x))
            return torch.cat([self.expand1x1_activation(self.expand1x1(x)), self.expand3x3_activation(self.expand3x3(x))], 1)

    class SqueezeNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 64, kernel_size=3, stride=2), nn.ReLU(inplace=True),
                nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True), Fire(64, 16, 64, 64), Fire(128, 16, 64, 64),
                nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True), Fire(128, 32, 128, 128), Fire(256, 32, 128, 128),
                nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True), Fire(256, 48, 192, 192), Fire(384, 48, 192, 192),
                Fire(384, 64, 256, 256), Fire(512, 64, 256, 256),
            )
            self.classifier = nn.Sequential(
                nn.Dropout(p=0.5), nn.Conv2d(512, classes, kernel_size=1), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d((1, 1))
            )

        def forward(self, x):
            return torch.flatten(self.classifier(self.features(x)), 1)

    torch.manual_seed(seed)
    return SqueezeNet().eval()
