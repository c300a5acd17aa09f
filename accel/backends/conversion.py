from accel.backends.native_fp8.convert import ConversionReport, LayerDecision

__all__ = ["ConversionReport", "LayerDecision"]
