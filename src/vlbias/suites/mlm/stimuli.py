"""Masked-entity stimuli: entities with their template captions, and the case study's image manifest.

    stimulus = load_mlm_stimulus("resources/stimuli/mlm/case_study.yaml")
    stimulus.caption("purse", "female")   # "The woman is carrying a {entity}."  ({entity}: masked later)
    images = read_image_manifest("resources/manifests/mlm_case_study.tsv")

A stimulus file (schema ``vlbias/schemas/mlm_stimulus.schema.yaml``) lists entities, each with its
stereotypical gender label, a template with ``{agent}`` and ``{entity}`` once each (or the file's
``template``), and optionally the contrasting entity of its pair. The agents are the paper's
woman / man / person unless the file names others.

An image manifest (schema ``vlbias/schemas/mlm_images.schema.yaml``) has the columns of the
grounded acquisition manifests with ``test`` = the entity and ``role`` = the agent's gender
(female | male), so the regions rule reads it as any dataset's manifest; the image id is
"<entity>/<gender>/<file>".
"""

from dataclasses import dataclass
from pathlib import Path


from vlbias.errors import InputError
from vlbias.io.fetch import read_manifest
from vlbias.io.stimuli import read_stimulus_file, schema, validate

GENDERS = ("female", "male")
AGENTS = ("female", "male", "neutral")
DEFAULT_AGENTS = {"female": "woman", "male": "man", "neutral": "person"}


@dataclass(frozen=True)
class Entity:
    entity: str
    stereotype: str          # female | male
    template: str            # with {agent} and {entity}
    contrast: str | None     # the other entity of its pair, or None


@dataclass(frozen=True)
class MlmStimulus:
    id: str
    name: str
    source: str
    agents: dict             # female / male / neutral -> agent word
    entities: tuple          # Entity, in file order

    def entity(self, name):
        for e in self.entities:
            if e.entity == name:
                return e
        raise InputError(f"stimulus '{self.id}'", f"has no entity '{name}'")

    def caption(self, entity, agent):
        """The template of ``entity`` with the ``agent`` (female | male | neutral) word filled in;
        ``{entity}`` stays for vlbias.suites.mlm.probability to mask."""
        return self.entity(entity).template.replace("{agent}", self.agents[agent])


def load_mlm_stimulus(path):
    """Read and check one stimulus file; errors name the file and the key."""
    path = Path(path)
    doc = read_stimulus_file(path, "mlm_stimulus.schema.yaml", "id, template, agents, entities")
    entities, seen = [], set()
    for i, e in enumerate(doc["entities"]):
        template = e.get("template", doc.get("template"))
        if template is None:
            raise InputError(path, f"key 'entities/{i}': entity '{e['entity']}' has no template and the file "
                                   "sets no default `template`")
        if e["entity"] in seen:
            raise InputError(path, f"key 'entities/{i}': entity '{e['entity']}' is listed twice")
        seen.add(e["entity"])
        entities.append(Entity(e["entity"], e["stereotype"], template, e.get("contrast")))
    by_name = {e.entity: e for e in entities}
    for i, e in enumerate(entities):
        if e.contrast is None:
            continue
        other = by_name.get(e.contrast)
        if other is None or other.contrast != e.entity or other.template != e.template:
            raise InputError(path, f"key 'entities/{i}/contrast': '{e.contrast}' must be an entity of this file "
                                   f"with the same template whose contrast is '{e.entity}'")
    return MlmStimulus(doc["id"], doc["name"], doc["source"], doc.get("agents", DEFAULT_AGENTS), tuple(entities))


@dataclass(frozen=True)
class ImageRow:
    id: str          # "<entity>/<gender>/<file>", the regions store's id
    entity: str
    gender: str      # female | male
    status: str      # ok | missing | failed
    reason: str
    path: str = ""   # the image file (status ok)


def read_image_manifest(path, entities=None):
    """Every row of an image manifest as ImageRow, in file order; errors name the file and the line.

    ``entities`` (names), when given, are the entities the rows may show.
    """
    rows = read_manifest(path)
    images_schema, out, seen = schema("mlm_images.schema.yaml"), [], set()
    for n, row in enumerate(rows, 1):
        where = f"{path} (row {n})"
        validate(row, where, images_schema)
        if row["status"] == "ok" and not row["path"]:
            raise InputError(where, "status ok but no path")
        if entities is not None and row["test"] not in entities:
            raise InputError(where, f"entity '{row['test']}' is not an entity of the stimulus "
                                    f"({', '.join(entities)})")
        image_id = f"{row['test']}/{row['role']}/{row['file']}"
        if image_id in seen:
            raise InputError(where, f"image {image_id} is listed twice")
        seen.add(image_id)
        out.append(ImageRow(image_id, row["test"], row["role"], row["status"], row.get("reason", ""), row["path"]))
    return out
