"""Where every stage reads and writes, relative to the repository root (dvc.yaml names the same paths).

Raw inputs differ by profile (the synthetic world, or published files under `data/raw/<dataset>/`); from
`data/processed/` and `data/features/` on, both profiles write the same files, so training, evaluation and
the tables never know which profile they run under.
"""
from __future__ import annotations

from pathlib import Path

PAPERS = Path(__file__).resolve().parent / "papers"  # one package per paper (papers/__init__.py)
RAW = Path("data/raw")
WORLD = RAW / "image_world"
DATASET_JSON = WORLD / "dataset_coco.json"
SCENE_GRAPHS = WORLD / "scene_graphs.json"
KARPATHY_COCO = RAW / "karpathy" / "dataset_coco.json"  # inside caption_datasets.zip
COCO_CAPTION_FILES = tuple(RAW / "coco_captions" / "annotations" / f"captions_{s}2014.json" for s in ("train", "val"))
VQA_WORLD = RAW / "vqa_world"  # the synthetic VQA world's files, VQA v2's names (worlds/vqa_world.py)
GROUNDING_WORLD = RAW / "grounding_world"  # the synthetic grounding world, Flickr30k Entities' layout
VIDEO_WORLD = RAW / "video_world"  # the synthetic video world: msvd/ and msrvtt/ in the datasets' layouts
VIDEO_FEATURES = RAW / "video_features"  # real profile: the user's <dataset>/<modality>.h5 (docs/real-data.md)
CAPTIONS = Path("data/processed/captions")
VQA = Path("data/processed/vqa")  # questions, answers and soft targets as arrays (stage prepro_vqa)
GROUNDING = Path("data/processed/grounding")  # sentences, phrases and entity boxes as arrays (prepro_grounding)
VIDEO = Path("data/processed/video")  # per video dataset, what CAPTIONS holds for images (stage prepro_video)
EXAMPLES = CAPTIONS / "examples"  # the qualitative examples: examples.json and a copy of each image
BACKBONE = Path("data/models/backbone.pt")
FEATURES = Path("data/features")
REGIONS = FEATURES / "regions.h5"
WORD_VECTORS = FEATURES / "word_vectors.txt"  # GloVe's text format (stage word_vectors): BAN-Glove's
WORD2VEC = FEATURES / "word2vec.txt"  # the same format (stage word2vec): the captioners' (HOCA's word2vec)
MODELS = Path("data/models")
PREDICTIONS = Path("data/predictions")
CHECKPOINTS = Path("data/checkpoints")
CODE = Path("data/code")  # one file per code closure a stage runs (stages/code.py)
PARAMS = Path("data/params")  # one file per stage: the values of the params it reads (stages/params.py)
METRICS = Path("reports/metrics")
TABLES = Path("reports/tables")
INDEX = Path("reports/index.md")


def paper_tables(paper: str) -> Path:
    """The folder of a paper's transcribed tables (`<id>.yaml`, reports/table_schema.py): in its package."""
    return PAPERS / paper / "tables"


def raw(dataset: str) -> Path:
    """Download directory of a published dataset (params.yaml `datasets`); a manual copy goes here too."""
    return RAW / dataset


def world_annotations(split: str) -> Path:
    """The synthetic world's COCO-format caption annotations of an evaluation split."""
    return WORLD / "annotations" / f"captions_{split}.json"


def corpus(name: str = "images") -> Path:
    """The processed captions of a corpus (config.data.CORPORA): the image world's, or one video dataset's."""
    return CAPTIONS if name == "images" else VIDEO / name


def references(split: str, corpus_name: str = "images") -> Path:
    """COCO-format reference captions of an evaluation split (val, test), whichever the profile."""
    return corpus(corpus_name) / "references" / f"captions_{split}.json"


def examples(corpus_name: str = "images") -> Path:
    """A corpus's qualitative examples (examples.json, and the images' copies)."""
    return corpus(corpus_name) / "examples"


def vocabulary(name: str, corpus_name: str = "images") -> Path:
    """Processed captions of one vocabulary convention (params.yaml `vocabularies`): labels.h5, vocab.json."""
    return corpus(corpus_name) / name


def submission(variant: str) -> Path:
    """The test-server caption file of a variant, named as the COCO server expects
    (`captions_test2014_<alg>_results.json`); on synthetic data the test split stands in for test2014."""
    return PREDICTIONS / variant / f"captions_test2014_{variant}_results.json"


def features(name: str) -> Path:
    """The HDF5 file of a feature set, the named input a system's `inputs` maps it to (data/feature_sets.py)."""
    return FEATURES / f"{name}.h5"


def code(closure_key: str) -> Path:
    """The file listing a code closure's files and their MD5s (pipeline/closures.py), a stage's only code dependency."""
    return CODE / f"{closure_key}.txt"


def params_values(stage: str, paper: str | None = None) -> Path:
    """The values of the params a stage reads (the `params` stage writes them; the stage depends on this file)."""
    return PARAMS / (f"{paper}/{stage}.json" if paper else f"{stage}.json")
