"""The shipped benchmark prompt sets (specviz.measure.prompt_sets): each file parsed and counted, its categories,
and `bench --prompts NAME --limit N --category C`."""

import json

import pytest

from specviz.cli import main
from specviz.core.inputs import PromptFileError
from specviz.measure.prompt_sets import FOLDER, SHIPPED, load_prompt_set

PARTI_CATEGORIES = [
    "Abstract", "Animals", "Artifacts", "Arts", "Food & Beverage", "Illustrations", "Indoor Scenes",
    "Outdoor Scenes", "People", "Produce & Plants", "Vehicles", "World Knowledge",
]  # fmt: skip


@pytest.mark.parametrize(
    "name, count, categories",
    # ImageNet: 999 names for 1,000 classes, as "crane" is both the bird (134) and the machine (517)
    [("parti", 1632, 12), ("coco", 5000, 1), ("geneval", 553, 6), ("dpg", 1065, 12), ("imagenet", 1000, 999)],
)
def test_each_shipped_set_is_read_whole_with_its_categories(name, count, categories):
    prompts = load_prompt_set(name)
    assert len(prompts) == count and all(prompt.text and prompt.text == prompt.text.strip() for prompt in prompts)
    assert len({prompt.category for prompt in prompts}) == categories


def test_the_sets_hold_what_their_sources_publish():
    parti = load_prompt_set("parti")
    assert sorted({prompt.category for prompt in parti}) == PARTI_CATEGORIES
    assert (parti[0].text, parti[0].category) == ("bond", "Abstract")  # the TSV's first row
    geneval = load_prompt_set("geneval")
    assert (geneval[0].text, geneval[0].category) == ("a photo of a bench", "single_object")
    dpg = load_prompt_set("dpg")
    assert sum(prompt.category == "partiprompts" for prompt in dpg) == 324 and min(len(p.text) for p in dpg) > 200
    imagenet = load_prompt_set("imagenet")
    assert (imagenet[207].text, imagenet[207].category) == ("207", "golden retriever")
    coco = [json.loads(line) for line in (FOLDER / "coco.jsonl").read_text().splitlines()]
    ids = [entry["image_id"] for entry in coco]
    assert ids == sorted(set(ids)) and len(ids) == 5000  # one caption per image, images in id order
    assert coco[0] == {
        "image_id": 139,
        "caption_id": 372891,
        "prompt": "A woman stands in the dining area at the table.",
    }
    assert set(SHIPPED) == {"parti", "coco", "geneval", "dpg", "imagenet"}


def test_a_category_and_a_limit_select_in_order(tmp_path):
    animals = load_prompt_set("parti", category="Animals")
    assert animals and {prompt.category for prompt in animals} == {"Animals"}
    assert load_prompt_set("parti", limit=3, category="Animals") == animals[:3]
    with pytest.raises(PromptFileError, match="no category 'Cats' in 'parti'; its categories: Abstract, Animals"):
        load_prompt_set("parti", category="Cats")
    own = tmp_path / "mine.txt"
    own.write_text("red apple\nblue car\n")
    assert [prompt.text for prompt in load_prompt_set(str(own), limit=1)] == ["red apple"]
    with pytest.raises(PromptFileError, match="a file's prompts have no categories"):
        load_prompt_set(str(own), category="Animals")
    with pytest.raises(PromptFileError, match="--limit must be 1 or more"):
        load_prompt_set("geneval", limit=0)


def test_bench_runs_a_category_of_a_shipped_set(tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["bench", "--methods", "ar", "--prompts", "parti", "--category", "Vehicles", "--limit", "1"]
    assert main([*argv, "--seeds", "1", "--skip-generate", "--json", str(out)]) == 0
    first = load_prompt_set("parti", limit=1, category="Vehicles")[0].text
    assert json.loads(out.read_text())["prompts"] == [first] and "| ar |" in capsys.readouterr().out
    assert main(["bench", "--prompts", "parti", "--category", "Cats"]) == 2
    assert "no category 'Cats' in 'parti'" in capsys.readouterr().err
