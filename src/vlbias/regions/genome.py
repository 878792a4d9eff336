"""Bottom-up-attention's Visual Genome vocabularies: the 1600 object and 400 attribute names its
detector's class and attribute ids index (py-bottom-up-attention's demo/data/genome/1600-400-20/
objects_vocab.txt, attributes_vocab.txt), and the object names whose boxes show people. Read by the
bua detector (vlbias.regions.bua) and by the TSV reader of its released features (vlbias.regions.tsv).
"""

from pathlib import Path

from vlbias.errors import InputError
from vlbias.io.fetch import sha256_file

VOCAB_BASE = ("https://raw.githubusercontent.com/airsplay/py-bottom-up-attention/"
              "85ec9b77bb57c125d6d604305bb525d9f50692be/demo/data/genome/1600-400-20/")

# The Visual Genome object names (first synonyms of objects_vocab.txt; every one is in it) whose
# boxes show people: by sex, age or number, by role (sports, riding, driving, police, cooking,
# crowds). Left out: ambiguous names ("pitcher" is mostly a jug, "fan" a ceiling fan), body parts,
# clothing, and pictures of people (statue, poster).
PERSON_CLASSES = frozenset({
    "person", "people", "man", "men", "young man", "woman", "women", "lady", "ladies", "guy", "adult",
    "boy", "boys", "girl", "girls", "little girl", "child", "children", "kid", "kids", "baby", "toddler",
    "mother", "bride", "groom", "couple", "family", "crowd", "audience", "spectator", "spectators", "fans",
    "passenger", "passengers", "pedestrian", "player", "players", "baseball player", "baseball players",
    "tennis player", "soccer player", "batter", "catcher", "umpire", "referee", "skier", "skiers", "skiier",
    "surfer", "surfers", "skateboarder", "snowboarder", "rider", "biker", "cyclist", "motorcyclist",
    "jockey", "driver", "pilot", "officer", "police officer", "policeman", "police", "chef", "worker",
})


def read_vocab(spec, key, n, optional, kind):
    """(names, sha256 of the file) from the entry's vocabulary ``key`` (objects_vocab, attributes_vocab):
    ``n`` names, each line's first comma-separated synonym; generated names (``<kind><i>``, sha256
    None) if the entry has none and they are ``optional``."""
    value = spec.get(key)
    if value is None:
        if optional:
            return [f"{kind}{i}" for i in range(n)], None
        raise InputError(key, f"the detector needs its {n} {kind} names, one per line: a local file or a "
                              f"pinned URL, e.g. {VOCAB_BASE}{key}.txt")
    path = Path(value)  # a URL reaches here fetched by vlbias.weights: its cached file
    if not path.is_file():
        raise InputError(value, f"{key}: file not found")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(value, f"{key}: cannot read ({e})") from None
    names = [line.split(",")[0].strip() for line in lines]
    if len(names) != n or not all(names):
        raise InputError(value, f"{key}: expected {n} non-empty lines (one {kind} name each), got "
                                f"{len(names)} lines, {names.count('')} empty")
    return names, sha256_file(path)
