"""The boundary study's charts: each mixer in its palette colour, the map's colour is accuracy above chance,
the window drawn as the floor, chance drawn, and every figure exports."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from ema_core import palette
from ema_core.studies.boundary.findings import FLOOR_MIXER as FLOOR, normalised
from ema_core.figures import chart_to_png, chart_to_svg
from ema_core.studies.boundary.findings import RECALL_LEVEL, ZOOLOGY_RECALL
from ema_core.studies.boundary.figures import (CROSSING, TASK_LABELS, boundary_frame, crossing_chart, dev_curve_chart,
                                       difficulty_order, dose_frame, dose_response_chart, heat_map, mixer_order,
                                       mqar_chart, recall_figures, recall_state_chart, recall_state_frame, run_figures)
from ema_core.mixers import MIXER_NAMES
from boundary_fixture import MIXERS as RUN_MIXERS, TINY


@pytest.fixture(scope="module")
def tables() -> dict[str, pd.DataFrame]:
    # The experiment itself at tiny sizes: the charts read whatever it really writes.
    from ema_core.experiments import REGISTRY, NullReporter, build_config

    cfg = build_config("boundary", overrides=TINY)
    return {k: pd.DataFrame(v) for k, v in REGISTRY["boundary"].run(cfg, NullReporter())["tables"].items()}


@pytest.fixture(scope="module")
def rows(tables) -> pd.DataFrame:
    return tables["boundary_accuracy"]


def _spec(chart) -> dict:
    # to_json goes through the strict JSON encoder: a NaN or ±inf left in the data would fail here.
    return json.loads(chart.to_json())


def _data(spec: dict) -> pd.DataFrame:
    """Every row of every dataset of a chart, stacked."""
    return pd.concat([pd.DataFrame(v) for v in spec.get("datasets", {}).values()], ignore_index=True)


def _layers(spec: dict) -> list[dict]:
    node = spec.get("spec", spec)
    return node.get("layer", [node])


def _color_map(layer: dict) -> dict:
    scale = layer["encoding"]["color"]["scale"]
    return dict(zip(scale["domain"], scale["range"]))


def test_every_built_in_mixer_has_its_own_colour_and_any_other_a_stable_one():
    assert tuple(palette.MIXER_COLORS) == MIXER_NAMES  # keyed from the one list, in the hierarchy's order
    colours = list(palette.MIXER_COLORS.values())
    assert len(set(colours)) == len(colours)
    # The floor must not read as the chance lines drawn beside it.
    assert palette.mixer_color(FLOOR) != palette.REFERENCE_COLOR
    mine = palette.mixer_color("my_own_mixer")
    assert mine == palette.mixer_color("my_own_mixer") and mine.startswith("#") and len(mine) == 7
    assert palette.mixer_color("ema") == palette.MIXER_COLORS["ema"]


def test_mixers_follow_the_registry_and_unknown_ones_come_after():
    assert mixer_order(["softmax", "zz_mine", "ema", "window_k", "aa_mine"]) == \
        ["window_k", "ema", "softmax", "aa_mine", "zz_mine"]
    assert set(TASK_LABELS) == set(CROSSING) | {"mqar", "lag_identity"}


def test_the_frame_is_a_mean_over_seeds_with_its_spread(rows):
    frame = boundary_frame(rows)
    assert (frame["n"] == TINY["seeds"]).all()
    assert list(dict.fromkeys(frame["mixer"])) == list(RUN_MIXERS)
    cell = rows[(rows["mixer"] == "ema") & (rows["task"] == "agree_content") & (rows["difficulty"] == "k=8,rho=0")]
    got = frame[(frame["mixer"] == "ema") & (frame["task"] == "agree_content")
                & (frame["difficulty"] == "k=8,rho=0")].iloc[0]
    assert got["redundancy"] == 0 and frame.loc[frame["task"] == "mqar", "redundancy"].isna().all()
    assert got["mean"] == pytest.approx(cell["accuracy"].mean())
    assert got["std"] == pytest.approx(cell["accuracy"].std(ddof=1))
    # A second run holding the same seeds (overlapping seed ranges) changes neither n, mean nor std.
    again = pd.concat([rows, rows.assign(run_id="another-run")], ignore_index=True)
    pd.testing.assert_frame_equal(boundary_frame(again), frame)


def test_the_maps_colour_is_accuracy_above_the_floor_and_its_text_the_accuracy_over_the_floor(rows):
    spec = _spec(heat_map(boundary_frame(rows)))
    cells, undefined, text, floor_text = _layers(spec)
    assert cells["mark"]["type"] == "rect" and cells["encoding"]["color"]["field"] == "above"
    assert cells["encoding"]["color"]["scale"]["range"] == list(palette.ABOVE_CHANCE_COLORS)
    assert undefined["mark"]["color"] == palette.REFERENCE_COLOR  # where above chance is undefined
    assert text["encoding"]["text"]["field"] == "text"
    # one facet per task: in a row, or wrapped onto rows where the tasks' headings would not fit one
    assert spec["facet"].get("column", spec["facet"])["field"] == "task_label"
    data = _data(spec)
    assert set(data["mixer"]) == set(RUN_MIXERS)
    assert len(data) == rows.groupby(["mixer", "task", "difficulty"]).ngroups  # every cell of the grid
    assert floor_text["encoding"]["text"]["field"] == "floor_text"
    assert "exclusion floor" in json.dumps(spec["title"])
    raised = 0
    for r in data.itertuples():
        seeds = rows[(rows["mixer"] == r.mixer) & (rows["task"] == r.task) & (rows["difficulty"] == r.difficulty)]
        # per seed against max(chance, floor), then averaged
        base = [max(c, f) for c, f in zip(seeds["chance"], seeds["exclusion_floor"])]
        above = [normalised(a, b) for a, b in zip(seeds["accuracy"], base)]
        assert r.above == pytest.approx(sum(above) / len(above))
        raised += any(f > c for c, f in zip(seeds["chance"], seeds["exclusion_floor"]))
        assert r.text == f"{seeds['accuracy'].mean():.2f}"
        assert r.floor_text == f"f {seeds['exclusion_floor'].mean():.2f}"
    assert raised  # some floor of this run is above chance: the colour is not accuracy above chance
    # A run stored before the floor: its cells are set against chance, and show no floor.
    old = heat_map(boundary_frame(rows.drop(columns=["exclusion_floor"])))
    for r in _data(_spec(old)).itertuples():
        seeds = rows[(rows["mixer"] == r.mixer) & (rows["task"] == r.task) & (rows["difficulty"] == r.difficulty)]
        assert r.above == pytest.approx(sum(normalised(a, c) for a, c in zip(seeds["accuracy"], seeds["chance"])) / 3)
        assert r.floor_text == ""
    # Rows of the map in the registry's order.
    assert cells["encoding"]["y"]["sort"] == list(RUN_MIXERS)


def test_the_crossing_draws_each_mixer_in_its_colour_and_the_window_over_the_others(rows):
    spec = _spec(crossing_chart(rows))  # the table's own rows are averaged first
    layers = spec["layer"]
    chance, *curves = layers
    assert chance["mark"]["color"] == palette.REFERENCE_COLOR and chance["encoding"]["y"]["field"] == "chance"
    lines = [layer for layer in curves if layer["mark"]["type"] == "line"]
    for line in lines:
        assert _color_map(line) == {m: palette.mixer_color(m) for m in RUN_MIXERS}
        assert line["encoding"]["x"]["scale"]["type"] == "log" and line["encoding"]["x"]["scale"]["base"] == 2
        dash = line["encoding"]["strokeDash"]["scale"]
        assert dash["domain"] == [label for label, _ in CROSSING.values()]
        assert dash["range"][0] == [1, 0]  # structure solid, content dashed
    # The floor: a layer of its own, drawn last (on top) and thicker than every other curve.
    floor = lines[-1]
    floor_rows = pd.DataFrame(spec["datasets"][floor["data"]["name"]])
    assert set(floor_rows["mixer"]) == {FLOOR}
    assert floor["mark"]["strokeWidth"] > max(line["mark"]["strokeWidth"] for line in lines[:-1])
    data = _data(spec)
    assert set(data["mixer"].dropna()) == set(RUN_MIXERS)
    assert set(data["variant"].dropna()) == {label for label, _ in CROSSING.values()}
    # Chance per variant and distance: the mean over every mixer's and seed's cells.
    chance_rows = pd.DataFrame(spec["datasets"][chance["data"]["name"]])
    structure = rows[(rows["task"] == "agree_structure") & (rows["level"] == 8) & (rows["redundancy"] == 0)]["chance"].mean()
    got = chance_rows[(chance_rows["variant"] == CROSSING["agree_structure"][0]) & (chance_rows["level"] == 8)]
    assert got["chance"].iloc[0] == pytest.approx(structure)


def test_the_dial_draws_structure_and_its_floor_against_redundancy_beyond_the_reach(rows):
    reach = 6  # the fixture's body: a 2-wide window behind a width-3 conv, two layers
    df = dose_frame(rows, reach)
    assert set(df["level"]) == {8} and sorted(set(df["redundancy"])) == [0.0, 1.0]
    assert set(df["mixer"]) == set(RUN_MIXERS) and len(df) == 2 * len(RUN_MIXERS)
    spec = _spec(dose_response_chart(rows, reach))
    floor, line, _ = spec["layer"]
    assert floor["mark"]["color"] == palette.REFERENCE_COLOR and floor["encoding"]["y"]["field"] == "floor"
    assert _color_map(line) == {m: palette.mixer_color(m) for m in RUN_MIXERS}
    assert line["encoding"]["x"]["field"] == "redundancy"
    floors = pd.DataFrame(spec["datasets"][floor["data"]["name"]]).set_index("redundancy")["floor"]
    want = rows[(rows["task"] == "agree_structure") & (rows["level"] == 8)].groupby("redundancy")["exclusion_floor"]
    assert floors.to_dict() == pytest.approx(want.mean().to_dict())
    assert "k = 8" in json.dumps(spec["title"]) and "reach of 6" in json.dumps(spec["title"])
    # Nothing beyond the reach, or no ρ (a run before the dial): no rows, and the run's figures leave it out.
    assert dose_frame(rows, reach=8).empty
    before = rows.assign(difficulty=rows["difficulty"].str.replace(r",rho=.*", "", regex=True))
    assert dose_frame(before.drop(columns="redundancy"), reach).empty


def test_the_map_orders_an_agreement_tasks_columns_by_redundancy_then_distance(rows):
    order = [d for d in difficulty_order(boundary_frame(rows)) if "rho" in d]
    assert order[:4] == ["k=1,rho=0", "k=8,rho=0", "k=1,rho=1", "k=8,rho=1"]


def test_the_mqar_chart_puts_recall_against_state_size(rows):
    spec = _spec(mqar_chart(rows))
    layers = _layers(spec)
    points = next(layer for layer in layers if layer["mark"]["type"] == "point")
    assert _color_map(points) == {m: palette.mixer_color(m) for m in RUN_MIXERS}
    assert points["encoding"]["x"]["field"] == "state_floats" and points["encoding"]["x"]["scale"]["type"] == "log"
    chance = next(layer for layer in layers if layer["mark"]["type"] == "rule" and "color" in layer["mark"])
    assert chance["mark"]["color"] == palette.REFERENCE_COLOR
    data = _data(spec)
    assert set(data["task"]) == {"mqar"} and set(data["mixer"]) == set(RUN_MIXERS)
    assert spec["facet"]["field"] == "difficulty" and spec["facet"]["sort"] == ["pairs=2,T=16", "pairs=4,T=16"]


def test_a_mixer_of_ones_own_is_drawn_after_the_built_in_ones_in_a_stable_colour(rows):
    mine = rows[rows["mixer"] == "ema"].assign(mixer="my_mixer")
    both = pd.concat([mine, rows], ignore_index=True)
    spec = _spec(crossing_chart(both))
    line = next(layer for layer in spec["layer"] if "color" in layer.get("encoding", {}))
    assert list(_color_map(line)) == [*RUN_MIXERS, "my_mixer"]
    assert _color_map(line)["my_mixer"] == palette.mixer_color("my_mixer")
    heat = _spec(heat_map(both))
    assert _layers(heat)[0]["encoding"]["y"]["sort"] == [*RUN_MIXERS, "my_mixer"]


def test_one_seed_draws_no_error_bars(rows):
    one = boundary_frame(rows[rows["seed"] == rows["seed"].min()])
    assert (one["n"] == 1).all() and one["std"].isna().all()
    spec = json.dumps(_spec(crossing_chart(one)))
    assert "one seed (no error bars)" in spec


def test_the_run_figures_export_as_svg_and_png(rows):
    figures = run_figures(rows)
    # (the dial needs a k beyond the default body's reach, 10: this run's farthest is 8)
    assert [stem for stem, _ in figures] == ["boundary_map", "boundary_crossing", "boundary_mqar"]
    far = rows.assign(level=rows["level"] * 2)
    assert [stem for stem, _ in run_figures(far)][:3] == ["boundary_map", "boundary_crossing", "boundary_redundancy"]
    for _, chart in figures:
        svg = chart_to_svg(chart)
        assert svg.lstrip().startswith("<svg") and "…" not in svg
        assert chart_to_png(chart, scale=1).startswith(b"\x89PNG")
    assert "agreement:" in chart_to_svg(figures[0][1])
    # Only the map where a run holds no agreement or MQAR task.
    lag = rows[rows["task"] == "lag_identity"]
    assert [stem for stem, _ in run_figures(lag)] == ["boundary_map"]
    assert run_figures(rows.iloc[0:0]) == []


def test_an_undefined_above_chance_is_left_out_of_the_colour_not_the_map(rows):
    sure = rows.head(1).assign(chance=1.0)
    frame = boundary_frame(sure)
    assert len(frame) == 1 and math.isnan(frame["above"].iloc[0])
    chart = heat_map(frame)
    _spec(chart)  # strict JSON: the NaN went out as null
    svg = chart_to_svg(chart)
    assert f'fill="{palette.REFERENCE_COLOR}"' in svg and f"{frame['mean'].iloc[0]:.2f}" in svg


def test_rows_without_a_level_a_state_or_a_length_still_chart(rows):
    # All three are nullable in the store: the level is read from the difficulty ("k=8" -> 8,
    # "pairs=4,T=16" -> 4), a missing state or length is an empty cell, not a crash.
    bare = rows.astype({"level": float, "state_floats": float, "seq_len": float})
    bare.loc[bare["mixer"] == "ema", ["level", "state_floats", "seq_len"]] = math.nan
    frame, whole = boundary_frame(bare), boundary_frame(rows)
    assert frame["level"].tolist() == whole["level"].tolist()
    assert frame["state_floats"].dtype == "Int64"
    assert frame.loc[frame["mixer"] == "ema", ["state_floats", "seq_len"]].isna().all().all()
    others = frame["mixer"] != "ema"
    assert frame.loc[others, "state_floats"].tolist() == whole.loc[others, "state_floats"].tolist()
    for chart in (heat_map(frame), crossing_chart(frame), mqar_chart(frame)):
        _spec(chart)  # strict JSON: the missing states went out as null
    assert [stem for stem, _ in run_figures(bare)] == ["boundary_map", "boundary_crossing", "boundary_mqar"]


def _recall_rows(spec_of):
    """boundary_recall_state rows with known numbers: (mixer, state floats, accuracy per seed)."""
    return pd.DataFrame([{"run_id": "r", "seed": s, "mixer": m, "difficulty": size, "d": floats // 8,
                          "accuracy": acc, "dev_accuracy": acc, "chance": 1 / 128, "lr": 1e-3,
                          "state_floats": floats, "params": 1000}
                         for size, specs in spec_of.items() for m, floats, accs in specs
                         for s, acc in zip((1, 2, 3), accs)])


def test_the_recall_chart_marks_the_smallest_state_reaching_the_bar_per_mixer():
    rows = _recall_rows({"pairs=4,T=64": [
        ("ema", 256, (0.1, 0.1, 0.1)), ("ema", 512, (0.2, 0.2, 0.2)), ("ema", 1024, (0.3, 0.3, 0.3)),
        ("gated_linear_attn", 512, (0.5, 0.6, 0.7)), ("gated_linear_attn", 2048, (0.9, 0.92, 0.94)),
        ("gated_linear_attn", 8192, (0.99, 0.99, 0.99)),
        ("window_k", 512, (0.0, 0.0, 0.0)), ("softmax", 8704, (1.0, 1.0, 1.0))],
        "pairs=16,T=64": [("gated_linear_attn", 2048, (0.5, 0.5, 0.5)), ("gated_linear_attn", 8192, (0.95, 0.9, 0.9))]})
    frame = recall_state_frame(rows)
    marked = frame[frame["reaches"]]
    # one ring per mixer and size that reaches 0.9, at its smallest such state; ema and the window reach none
    assert set(zip(marked["mixer"], marked["difficulty"], marked["state_floats"])) == {
        ("gated_linear_attn", "pairs=4,T=64", 2048), ("softmax", "pairs=4,T=64", 8704),
        ("gated_linear_attn", "pairs=16,T=64", 8192)}
    assert (frame["n"] == 3).all() and list(dict.fromkeys(frame["mixer"])) == [
        "window_k", "ema", "gated_linear_attn", "softmax"]
    spec = _spec(recall_state_chart(frame))
    layers = _layers(spec)
    line = next(layer for layer in layers if layer["mark"]["type"] == "line")
    assert line["encoding"]["x"]["field"] == "state_floats" and line["encoding"]["x"]["scale"]["type"] == "log"
    assert _color_map(line) == {m: palette.mixer_color(m) for m in ["window_k", "ema", "gated_linear_attn", "softmax"]}
    ring = next(layer for layer in layers if layer["mark"]["type"] == "point")
    assert ring["transform"][-1] == {"filter": "datum.reaches"} and ring["mark"]["filled"] is False
    # zoology's published points, labelled, in every facet, never one of this map's mixers
    published = [layer for layer in layers if layer.get("transform") == [{"filter": "!(datum.ref === '')"}]]
    assert [layer["mark"]["type"] for layer in published] == ["point", "text"]
    refs = _data(spec).dropna(subset=["ref"])
    refs = refs[refs["ref"] != ""]
    assert len(refs) == 2 * len(ZOOLOGY_RECALL) and set(refs["ref"]) == {"GLA", "DeltaNet", "sliding window"}
    assert refs["mixer"].isna().all() and "2 layers, vocabulary 8,192" in json.dumps(spec["title"])
    bar = next(layer for layer in layers if layer["mark"]["type"] == "rule" and "level" in json.dumps(layer["encoding"]))
    assert set(_data(spec)["level"]) == {RECALL_LEVEL} and bar["mark"]["color"] == palette.REFERENCE_COLOR
    assert spec["facet"]["sort"] == ["pairs=4,T=64", "pairs=16,T=64"]  # by pairs, not by the alphabet
    assert f"smallest state reaching {RECALL_LEVEL:g}" in json.dumps(spec["title"])
    svg = chart_to_svg(recall_state_chart(frame))
    assert svg.lstrip().startswith("<svg") and "…" not in svg


def test_a_real_runs_recall_rows_and_dev_curves_chart(tables):
    recall, curves = tables["boundary_recall_state"], tables["boundary_dev_curve"]
    frame = recall_state_frame(recall)
    # ema at both recall widths (8, 16), softmax and the window at the body's (16) beside it
    assert sorted(frame.loc[frame["mixer"] == "ema", "d"].unique()) == [8, 16]
    assert set(frame.loc[frame["mixer"] != "ema", "d"]) == {16} and (frame["n"] == 3).all()
    [(stem, chart)] = recall_figures(recall)
    assert stem == "boundary_recall_state" and chart_to_png(chart, scale=1).startswith(b"\x89PNG")
    assert recall_figures(recall.iloc[0:0]) == [] and recall_state_frame(recall.iloc[0:0]).empty
    one = curves[(curves["mixer"] == "ema") & (curves["task"] == "mqar")]
    one = one[(one["difficulty"] == one["difficulty"].iloc[0]) & (one["d"] == 16)]
    spec = _spec(dev_curve_chart(one, "ema on MQAR"))
    data = _data(spec)
    assert spec["encoding"]["x"]["field"] == "step" and set(data["rate"]) == {"0.01"}
    # the mean over seeds of every rate's dev accuracy at each step
    assert data.set_index("step")["dev"].to_dict() == pytest.approx(one.groupby("step")["dev_accuracy"].mean().to_dict())
    assert (data["n"] == 3).all()


def _full_grid() -> pd.DataFrame:
    """Rows shaped like the full preset's: every mixer, six distances per agreement and lag task, eleven
    MQAR sizes (known numbers, a test input)."""
    out = []
    for i, m in enumerate(MIXER_NAMES):
        for task in TASK_LABELS:
            levels = range(1, 12) if task == "mqar" else (1, 2, 4, 8, 16, 32)
            for level in levels:
                difficulty = f"pairs={level},T=64" if task == "mqar" else f"k={level}"
                out += [dict(mixer=m, task=task, difficulty=difficulty, level=level, seq_len=64, seed=s,
                             accuracy=0.4 + 0.07 * i, chance=0.25, exclusion_floor=0.3, state_floats=64 * (i + 1))
                        for s in (0, 1)]
    return pd.DataFrame(out)


def test_a_full_maps_charts_fit_a_page_and_their_legends_name_every_mixer():
    # A facet is not narrowed to its column: the map and the MQAR panels size themselves to PAGE_WIDTH
    # (smaller cells, wrapped tasks and panels); every label whole, every mixer in the legends.
    import re

    from ema_core.figures import PAGE_WIDTH

    grid = _full_grid()
    for chart in (heat_map(grid), mqar_chart(grid), crossing_chart(grid)):
        svg = chart_to_svg(chart)
        assert float(re.search(r'<svg[^>]* width="([\d.]+)"', svg).group(1)) <= PAGE_WIDTH
        assert "…" not in svg
    spec = _spec(heat_map(grid))
    assert spec["columns"] < len(TASK_LABELS) and "facet" in spec  # wrapped, not one long row
    assert spec["spec"]["width"]["step"] >= 24  # "0.97" still fits a cell
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", chart_to_svg(crossing_chart(grid)))
    assert set(MIXER_NAMES) <= set(texts)


def test_the_crossing_sets_mixers_apart_along_k_and_keeps_the_true_k():
    grid = _full_grid()
    spec = _spec(crossing_chart(grid))
    line = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "line" and "color" in layer["encoding"])
    assert line["encoding"]["x"]["field"] == "k_drawn"
    data = _data(spec).dropna(subset=["mixer"])
    at8 = data[data["level"] == 8].drop_duplicates("mixer").set_index("mixer")["k_drawn"]
    # one position per mixer around k = 8, in the hierarchy's order, none further than a fifth of an octave
    assert list(at8.sort_values().index) == [m for m in MIXER_NAMES if m in at8.index]
    assert at8.nunique() == len(at8) and ((at8 / 8).map(math.log2).abs() <= 0.2).all()
    assert any(t.get("field") == "level" for t in line["encoding"]["tooltip"])  # the tooltip says the true k
