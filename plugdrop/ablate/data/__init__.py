"""Data of an ablation: what ``data:`` names (:mod:`.spec`), timm's preprocessing
(:mod:`.transforms`), image files read lazily with unreadable ones handled (:mod:`.images`), the
data sets (:mod:`.sets`: digits, ImageFolder trees, torchvision classes) and the loaders
(:mod:`.loaders`)."""

from .images import BadImage
from .loaders import CheckedLoader, ShardSampler, default_workers, make_loader
from .sets import BAD_IMAGES, SPLIT_SEED, VAL_SPLIT_NAMES, DataSets, build_datasets
from .spec import DataSpec, parse_data_spec
from .transforms import AUGMENT_KEYS

__all__ = ["AUGMENT_KEYS", "BAD_IMAGES", "BadImage", "CheckedLoader", "DataSets", "DataSpec",
           "SPLIT_SEED", "ShardSampler", "VAL_SPLIT_NAMES", "build_datasets", "default_workers",
           "make_loader", "parse_data_spec"]
