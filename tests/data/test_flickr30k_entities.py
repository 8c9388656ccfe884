"""Flickr30k Entities reader: sentences with phrases, boxes, which phrases are grounded, split lists."""
from __future__ import annotations

import re
import zipfile
from pathlib import Path

import pytest

from crossmodal.data.flickr30k_entities import (
    ARCHIVE,
    EntityPhrase,
    EntityRelease,
    check_splits,
    grounding_phrases,
    parse_entity_sentence,
    phrase_status,
    read_entity_boxes,
    read_entity_sentences,
    read_split_ids,
)
from crossmodal.io import InputError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # copies of ../shared/fixtures (see its README)
ROOT = FIXTURES / "flickr30k_entities"
IMAGE_ID = 1000092795


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    """The sample as the release ships it: both files in annotations.zip, read in place."""
    root = tmp_path_factory.mktemp("release")
    with zipfile.ZipFile(root / ARCHIVE, "w", zipfile.ZIP_DEFLATED) as archive:
        for member in (f"Sentences/{IMAGE_ID}.txt", f"Annotations/{IMAGE_ID}.xml"):
            archive.write(ROOT / member, member)
    with EntityRelease(root) as release:
        return release.image(IMAGE_ID)


def test_the_archive_reads_as_the_files_do(image):
    assert list(image.sentences) == read_entity_sentences(ROOT / "Sentences" / f"{IMAGE_ID}.txt")
    assert image.annotation == read_entity_boxes(ROOT / "Annotations" / f"{IMAGE_ID}.xml")


def test_sentences_and_phrases(image):
    sentences = image.sentences
    assert [s.text for s in sentences] == [
        "Two young guys with shaggy hair look at their hands while hanging out in the yard .",
        "Two young , White males are outside near many bushes .",
        "Two men in green shirts are standing in a yard .",
        "A man in a blue shirt standing in a garden .",
        "Two friends enjoy time spent together .",
    ]
    assert sentences[0].phrases == (
        EntityPhrase(0, "Two young guys", 1, ("people",)),
        EntityPhrase(4, "shaggy hair", 2, ("bodyparts",)),
        EntityPhrase(8, "their hands", 3, ("bodyparts",)),
        EntityPhrase(14, "the yard", 8, ("scene",)),
    )
    assert sentences[1].phrases[0] == EntityPhrase(0, "Two young , White males", 1, ("people",))
    assert [(p.chain_id, p.types) for p in sentences[3].phrases] == [(6, ("people",)), (7, ("clothing",)), (9, ("scene",))]
    assert sentences[4].phrases[1] == EntityPhrase(3, "time", 10, ("other",))
    for sentence in sentences:  # first/last word indices point at the phrase inside the sentence
        for phrase in sentence.phrases:
            assert " ".join(sentence.words[phrase.first_word_index:phrase.last_word_index + 1]) == phrase.text
    assert sentences[0].phrases[3].last_word_index == 15
    assert read_entity_sentences(ROOT / "Sentences" / f"{IMAGE_ID}.txt") == list(sentences)


def test_boxes_and_flags(image):
    ann = image.annotation
    assert (ann.width, ann.height, ann.depth) == (333, 500, 3)
    assert ann.boxes == {  # file values (1-based pixels), as BAN uses them
        1: ((159, 125, 219, 335), (197, 110, 261, 373)),  # the second object names chains 1 and 6
        4: ((1, 220, 211, 473), (276, 215, 332, 337)),
        6: ((197, 110, 261, 373),),
    }
    assert ann.nobox_chains == {10} and ann.scene_chains == frozenset()


def test_grounded_phrases_need_a_box(image):
    ann = image.annotation
    grounded = [[(p.chain_id, p.text) for p in grounding_phrases(s, ann)] for s in image.sentences]
    assert grounded == [
        [(1, "Two young guys")],                        # chains 2, 3, 8 are elided from the excerpt's XML
        [(1, "Two young , White males"), (4, "many bushes")],
        [(1, "Two men")],
        [(6, "A man")],
        [(1, "Two friends")],                           # chain 10 is marked no-box
    ]
    statuses = [phrase_status(p, ann) for p in image.sentences[4].phrases]
    assert statuses == ["boxed", "nobox"]
    assert phrase_status(image.sentences[0].phrases[1], ann) == "unannotated"


def test_chain_zero_is_never_grounded(tmp_path, image):
    sentence = parse_entity_sentence("[/EN#0/notvisual Two friends] enjoy [/EN#1/people/other a crowd] .")
    assert sentence.text == "Two friends enjoy a crowd ."
    assert sentence.phrases[1].types == ("people", "other")
    assert sentence.phrases[1].first_word_index == 3
    xml = tmp_path / "0.xml"
    xml.write_text("<annotation><size><width>9</width><height>9</height><depth>3</depth></size>"
                   "<object><name>0</name><name>1</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>5</xmax><ymax>5</ymax></bndbox></object>"
                   "</annotation>")
    ann = read_entity_boxes(xml)
    assert phrase_status(sentence.phrases[0], ann) == "notvisual"
    assert [p.chain_id for p in grounding_phrases(sentence, ann)] == [1]


def test_scene_flags_and_empty_boxes(tmp_path):
    xml = tmp_path / "1.xml"
    xml.write_text("<annotation><size><width>9</width><height>9</height><depth>3</depth></size>"
                   "<object><name>3</name><name>4</name><scene>1</scene><nobndbox>0</nobndbox></object>"
                   "<object><name>5</name><bndbox></bndbox></object>"
                   "</annotation>")
    ann = read_entity_boxes(xml)
    assert ann.scene_chains == {3, 4} and ann.nobox_chains == frozenset() and ann.boxes == {}
    sentence = parse_entity_sentence("[/EN#3/scene the yard] and [/EN#5/other grass]")
    assert [phrase_status(p, ann) for p in sentence.phrases] == ["scene", "unannotated"]
    assert grounding_phrases(sentence, ann) == []


def test_split_lists():
    splits = {name: read_split_ids(ROOT / f"{name}_head5.txt") for name in ("train", "val", "test")}
    assert splits["train"] == [3359636318, 6959556104, 2326294409, 2494088238, 3892428805]
    assert splits["val"][0] == 100652400 and splits["test"][-1] == 92679312
    assert check_splits(splits, excerpt=True) == {"train": 5, "val": 5, "test": 5}
    with pytest.raises(InputError, match="official ones are"):
        check_splits(splits)
    with pytest.raises(InputError, match="image 100652400 is in both val and test"):
        check_splits({**splits, "test": [100652400]}, excerpt=True)


# --- malformed input ------------------------------------------------------------------------------

@pytest.mark.parametrize("line, message", [
    ("[/EN1/people a man] runs", "malformed phrase header '[/EN1/people'"),
    ("[/EN#1 a man] runs", "malformed phrase header '[/EN#1'"),
    ("[/EN#1/person a man] runs", "unknown entity type 'person'"),
    ("[/EN#1/people a man runs", "phrase of chain 1 is not closed at the end of the line"),
    ("a man] runs", "'man]' closes a phrase that was never opened"),
    ("[/EN#1/people a [/EN#2/other man] runs", "is not closed before '[/EN#2/other'"),
    ("[/EN#1/people ] runs", "phrase of chain 1 has no words"),
])
def test_malformed_sentences(line, message):
    with pytest.raises(InputError, match=re.escape(message)):
        parse_entity_sentence(line, "x.txt:1")


def _xml(tmp_path, objects, size="<size><width>9</width><height>9</height><depth>3</depth></size>"):
    path = tmp_path / "a.xml"
    path.write_text(f"<annotation>{size}{objects}</annotation>")
    return path


@pytest.mark.parametrize("objects, size, message", [
    ("", "", "missing <size>"),
    ("", "<size><width>9</width><height>x</height><depth>3</depth></size>", "<height> is 'x', not an integer"),
    ("<object><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>2</xmax><ymax>2</ymax></bndbox></object>", None, "object 1 has no <name>"),
    ("<object><name>a</name><scene>1</scene><nobndbox>0</nobndbox></object>", None, "<name> is 'a', expected a chain id"),
    ("<object><name>1</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>2.5</xmax><ymax>2</ymax></bndbox></object>", None,
     "<xmax> is '2.5', not an integer"),
    ("<object><name>1</name><bndbox><xmin>1</xmin><ymin>1</ymin><ymax>2</ymax></bndbox></object>", None, "has no <xmax>"),
    ("<object><name>1</name><bndbox><xmin>5</xmin><ymin>1</ymin><xmax>2</xmax><ymax>2</ymax></bndbox></object>", None,
     "xmin > xmax"),
    ("<object><name>1</name><nobndbox>1</nobndbox></object>", None, "object 1 has no <scene>"),
])
def test_malformed_annotations(tmp_path, objects, size, message):
    path = _xml(tmp_path, objects) if size is None else _xml(tmp_path, objects, size)
    with pytest.raises(InputError, match=re.escape(message)):
        read_entity_boxes(path)


def test_missing_and_unparsable_files(tmp_path):
    (tmp_path / "bad.xml").write_text("<annotation><size>")
    with pytest.raises(InputError, match="not valid XML"):
        read_entity_boxes(tmp_path / "bad.xml")
    with pytest.raises(InputError, match="missing Flickr30k Entities archive"):
        EntityRelease(tmp_path)
    (tmp_path / ARCHIVE).write_text("not a zip")
    with pytest.raises(InputError, match="annotations.zip: not a zip archive"):
        EntityRelease(tmp_path)
    with zipfile.ZipFile(tmp_path / ARCHIVE, "w") as archive:
        archive.writestr(f"Sentences/{IMAGE_ID}.txt", "[/EN#1/people A man] runs .\n")
    with EntityRelease(tmp_path) as release, pytest.raises(InputError, match=f"has no Annotations/{IMAGE_ID}.xml"):
        release.image(IMAGE_ID)
    with pytest.raises(InputError, match="missing Flickr30k Entities sentence file"):
        read_entity_sentences(tmp_path / "none.txt")
    (tmp_path / "ids.txt").write_text("12\n3x\n")
    with pytest.raises(InputError, match=re.escape("ids.txt:2: '3x' is not an image id")):
        read_split_ids(tmp_path / "ids.txt")
    (tmp_path / "ids.txt").write_text("12\n13\n12\n\n")
    with pytest.raises(InputError, match="image id 12 appears twice"):
        read_split_ids(tmp_path / "ids.txt")
    (tmp_path / "s.txt").write_text("[/EN#1/people A man] runs .\n\n[/EN#2/animals a dog\n")
    with pytest.raises(InputError, match=re.escape("s.txt:3: phrase of chain 2 is not closed")):
        read_entity_sentences(tmp_path / "s.txt")
