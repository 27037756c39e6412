"""Old name of `engine.module_reuse` (module-based on-chip reuse), kept so `from engine.modules import ...` works."""

from engine.module_reuse import Module, ModulePlan, NpuModel, Region, Step, Structure, Traffic, plan_modules

__all__ = ["plan_modules", "ModulePlan", "Module", "NpuModel", "Region", "Step", "Traffic", "Structure"]
