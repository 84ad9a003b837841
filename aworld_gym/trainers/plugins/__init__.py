"""Files that trainers load by path (ms-swift's ``--external_plugins``). Each one only imports its face: this folder
holds nothing else, because a trainer that loads a file by path puts its folder first on ``sys.path`` (a file next to
``aworld_gym/trainers/trl.py`` would make ``import trl`` find ours)."""

from pathlib import Path

SWIFT = Path(__file__).with_name("aworld_swift.py")
