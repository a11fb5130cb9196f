"""Training one run: the processes (:mod:`.distributed`), stopping on a signal
(:mod:`.signals`), the random state (:mod:`.rng`), what a run is built from (:mod:`.build`),
the trainer (:mod:`.trainer`: step, epoch, evaluation, checkpoint state), the dry step
(:mod:`.dry`) and Grad-CAM (:mod:`.gradcam`)."""

from .distributed import Dist, agree, on_rank0, resolve_device, setup_distributed, world_from_env
from .dry import dry_run, dry_step
from .gradcam import gradcam_layer, save_gradcam
from .signals import SIGNALS, StopFlag, Stopped
from .trainer import Trainer

__all__ = ["Dist", "SIGNALS", "StopFlag", "Stopped", "Trainer", "agree", "dry_run", "dry_step",
           "gradcam_layer", "on_rank0", "resolve_device", "save_gradcam",
           "setup_distributed", "world_from_env"]
