import json

import pytest

from aworld_gym.base.errors import TaskError
from aworld_gym.core.task import Task, load_tasks


def test_jsonl_json_and_dicts(tmp_path):
    rows = [{"task_id": "a", "Question": "q1", "Final answer": "1", "Level": 2}, {"prompt": "q2", "answer": "2"}]
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    src = load_tasks(p)
    assert src.ids == ["a", "1"]
    assert src.get("a").metadata["Level"] == 2 and src.get("a").answer == "1"
    j = tmp_path / "t.json"
    j.write_text(json.dumps(rows))
    assert load_tasks(str(j)).ids == ["a", "1"]
    assert load_tasks([Task("x", "p")]).get("x").prompt == "p"


def test_hf_dataset():
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_list([{"id": "d1", "prompt": "hello", "answer": "x", "files": []}])
    src = load_tasks(ds)
    assert len(src) == 1 and src[0].id == "d1" and src[0].answer == "x"


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        ([], "empty"),
        ([{"id": "a"}], "non-empty 'prompt'"),
        ([{"id": "a", "prompt": "p"}, {"id": "a", "prompt": "q"}], "duplicate task id"),
        ([{"prompt": "p", "files": [1]}], "'files' must be a list"),
        (42, "must be a .jsonl/.json path"),
        ("/no/such/file.jsonl", "does not exist"),
    ],
)
def test_bad_task_data_is_a_clear_error(spec, fragment):
    with pytest.raises(TaskError, match=fragment):
        load_tasks(spec)


def test_bad_json_line_names_the_line(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"prompt": "ok"}\n{oops\n')
    with pytest.raises(TaskError, match=r"t.jsonl:2"):
        load_tasks(p)


def test_unknown_id_lists_some_ids():
    src = load_tasks([{"id": "a", "prompt": "p"}])
    with pytest.raises(TaskError, match="first ids: a"):
        src.get("zz")


def test_metadata_that_is_not_an_object_is_a_clear_error():
    """Found by the fuzz test: ``"metadata": 1`` or ``"0"`` raised a TypeError/ValueError from dict()."""
    import pytest

    from aworld_gym.base.errors import TaskError
    from aworld_gym.core.task import load_tasks

    for bad in (1, "0", [1, 2]):
        with pytest.raises(TaskError, match="'metadata' must be a JSON object"):
            load_tasks([{"prompt": "p", "metadata": bad}])


def test_a_task_without_an_answer_is_refused_when_the_scorer_compares_answers():
    from aworld_gym.core.scoring import contains_match, exact_match, get_scorer, require_answers

    tasks = load_tasks([{"id": "q1", "prompt": "2+2?", "answer": "4"}, {"id": "q2", "prompt": "3+3?"}])
    for scorer, name in ((exact_match, "exact"), (get_scorer("contains"), "contains")):
        with pytest.raises(TaskError) as caught:
            require_answers(tasks, scorer, "Lab/Quiz-v0")
        assert str(caught.value) == (
            f"Lab/Quiz-v0: task 'q2' has no 'answer' (nor 'final_answer' / 'ground_truth'), and the scorer '{name}' "
            "compares the submitted answer with it: give the task an answer, or a scorer that needs none "
            "(scorer=<a callable (answer, task) -> float that reads what it needs>, or an env that overrides "
            "score(), as AWorld/Code-v0 does by running the task's tests)"
        )
    assert contains_match is get_scorer("contains")
    require_answers(tasks, lambda answer, task: 1.0)  # a callable scorer reads what it needs: not checked
    require_answers(tasks, None)  # the env scores itself (Code-v0's tests, Browser-v0's page reward)
    require_answers(tasks[:1], exact_match)  # every task has an answer


def test_mcpenv_refuses_a_task_without_an_answer_at_load():
    from aworld_gym.core.env import MCPEnv
    from aworld_gym.mcp.demo_server import build_server

    with pytest.raises(TaskError, match="task 'q2' has no 'answer'"):
        MCPEnv(servers={"calc": build_server()}, tasks=[{"id": "q2", "prompt": "3+3?"}])


def test_one_parsed_source_per_task_list_or_file_in_a_process(tmp_path):
    """A run's envs share one parsed copy of its tasks: each env parsing its own made memory grow with the square
    of the envs in flight (issue 48: 2,048 envs of 2,048 tasks took 3.8 GB)."""
    rows = [{"id": str(i), "prompt": f"q{i}", "answer": str(i)} for i in range(50)]
    assert load_tasks(rows) is load_tasks(rows)
    assert load_tasks(list(rows)) is not load_tasks(rows)  # another list: parsed on its own
    edited = list(rows)
    load_tasks(edited)
    edited[3] = {"id": "x", "prompt": "changed", "answer": "0"}  # an item replaced in place: read again
    assert load_tasks(edited).get("x").prompt == "changed" and load_tasks(edited) is load_tasks(edited)
    edited.append({"id": "y", "prompt": "added", "answer": "0"})
    assert load_tasks(edited).ids[-1] == "y"
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows))
    first = load_tasks(p)
    assert load_tasks(str(p)) is first and len(first) == 50
    p.write_text(json.dumps({"id": "new", "prompt": "q", "answer": "a"}))  # a changed file is read again
    assert load_tasks(p).ids == ["new"]


def test_mcpenvs_made_from_one_task_list_share_its_parsed_tasks():
    from aworld_gym.core.env import MCPEnv
    from aworld_gym.mcp.demo_server import build_server

    rows = [{"id": str(i), "prompt": f"{i}+1?", "answer": str(i + 1)} for i in range(20)]
    envs = [MCPEnv(servers={"calc": build_server()}, tasks=rows) for _ in range(3)]
    try:
        assert envs[0].tasks is envs[1].tasks is envs[2].tasks
    finally:
        for env in envs:
            env.close()


def test_code_tasks_from_one_list_are_checked_once_and_shared():
    from aworld_gym.envs.code.tasks import code_tasks

    rows = [{"task_id": "t", "prompt": "def f():\n", "entry_point": "f", "test": "def check(c): pass"}]
    assert code_tasks(rows) is code_tasks(rows)
    with pytest.raises(TaskError, match="lacks"):
        code_tasks([{"task_id": "x", "prompt": "def f(): pass"}])
