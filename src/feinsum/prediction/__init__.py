"""The performance model: a configuration's time on a GPU, predicted from its generated code
(loopy's statistics, per-warp memory transactions, the hardware's pipes) without running it.
docs/performance-model.rst describes it, its calibration on the H200 and how to use it."""

from feinsum.prediction.configuration import (
    fastest,
    floor_seconds,
    predict_configuration,
    roofline_seconds,
)
from feinsum.prediction.hardware import HARDWARE, Hardware, hardware_for
from feinsum.prediction.model import RESOURCES, Prediction, predict

__all__ = ["HARDWARE", "RESOURCES", "Hardware", "Prediction", "fastest", "floor_seconds",
           "hardware_for", "predict", "predict_configuration", "roofline_seconds"]
