"""torchvision's models on the CPU build of PyTorch the project pins.

PyPI's torchvision wheel (python/requirements.txt) is built against PyTorch's
CUDA libraries. With the CPU PyTorch of .venv its compiled operators (nms,
roi_align, deform_conv2d: torchvision/_C.so) cannot load, and ``import
torchvision`` then fails while registering fake kernels for those operators.
``transformers`` imports torchvision whenever it is installed, so every test
and script that imports ``transformers`` imports this module first
(conftest.py and hf_models.py do). The classification models (ViT, ResNet, DenseNet, MobileNet, EfficientNet,
ConvNeXt, Swin) use none of them, so the two registration modules are skipped
when the operators are absent; with a torchvision whose operators load (a CUDA
machine, or a CPU wheel of torchvision) nothing is skipped.

    from torchvision_models import torchvision
    model = torchvision.models.vit_b_16()
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types


def _import_torchvision():
    if "torchvision" in sys.modules:
        return sys.modules["torchvision"]
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.submodule_search_locations is None:
        raise ImportError("torchvision is not installed: run `make deps-python` (python/requirements.txt pins it)")
    import torch

    package_dir = list(spec.submodule_search_locations)[0]
    extension = [name for name in os.listdir(package_dir) if name.startswith("_C.") and name.endswith(".so")]
    loads = False
    if extension:
        try:
            torch.ops.load_library(os.path.join(package_dir, extension[0]))
            loads = True
        except OSError:
            loads = False
    if not loads:
        for name in ("torchvision._meta_registrations", "torchvision._autograd_registrations"):
            sys.modules.setdefault(name, types.ModuleType(name))
    import torchvision as module

    return module


torchvision = _import_torchvision()
