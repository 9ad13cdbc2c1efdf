from src.builder import Builder
from src.fs import MemoryFS
from src.state import StateStore
from src.targets import Project


def copy_inputs(ctx):
    ctx.write_text(ctx.outputs[0], "".join(ctx.read_text(p) for p in ctx.inputs))


def wrap(tag):
    """An action that wraps the outputs of every dependency in ``tag``."""

    def action(ctx):
        paths = []
        for dep in ctx.dependencies:
            paths.extend(ctx.dependency_outputs(dep))
        paths.extend(p for p in ctx.inputs if p not in paths)
        parts = [ctx.read_text(p) for p in paths]
        ctx.write_text(ctx.outputs[0], f"{tag}(" + "+".join(parts) + ")")

    return action


def chain_project():
    project = Project()
    project.add("a", copy_inputs, inputs=["a.txt"], outputs=["out/a"])
    project.add("b", wrap("b"), deps=["a"], outputs=["out/b"])
    project.add("c", wrap("c"), deps=["b"], outputs=["out/c"])
    project.add("d", wrap("d"), deps=["c"], outputs=["out/d"])
    return project


def test_change_reaches_every_transitive_dependent():
    fs = MemoryFS({"a.txt": "1"})
    builder = Builder(chain_project(), fs)
    builder.build()
    assert fs.read_text("out/d") == "d(c(b(1)))"
    fs.write_text("a.txt", "2")
    result = builder.build()
    assert result.ran == ["a", "b", "c", "d"]
    assert fs.read_text("out/d") == "d(c(b(2)))"
    assert builder.build().ran == []


def test_change_in_the_middle_rebuilds_only_what_is_below():
    fs = MemoryFS({"a.txt": "1", "c.txt": "x"})
    project = Project()
    project.add("a", copy_inputs, inputs=["a.txt"], outputs=["out/a"])
    project.add("b", wrap("b"), deps=["a"], outputs=["out/b"])
    project.add("c", wrap("c"), deps=["b"], inputs=["c.txt"], outputs=["out/c"])
    project.add("d", wrap("d"), deps=["c"], outputs=["out/d"])
    project.add("e", wrap("e"), deps=["d"], outputs=["out/e"])
    builder = Builder(project, fs)
    builder.build()
    fs.write_text("c.txt", "y")
    result = builder.build()
    assert result.ran == ["c", "d", "e"]
    assert result.skipped == ["a", "b"]
    assert fs.read_text("out/e") == "e(d(c(b(1)+y)))"


def test_diamond_rebuilds_each_target_once_in_order():
    fs = MemoryFS({"root.txt": "r"})
    project = Project()
    project.add("root", copy_inputs, inputs=["root.txt"], outputs=["out/root"])
    project.add("left", wrap("L"), deps=["root"], outputs=["out/left"])
    project.add("right", wrap("R"), deps=["root"], outputs=["out/right"])
    project.add("join", wrap("J"), deps=["left", "right"], outputs=["out/join"])
    project.add("top", wrap("T"), deps=["join"], outputs=["out/top"])
    builder = Builder(project, fs)
    builder.build()
    fs.write_text("root.txt", "s")
    result = builder.build()
    assert result.ran == ["root", "left", "right", "join", "top"]
    assert fs.read_text("out/top") == "T(J(L(s)+R(s)))"


def test_building_a_subset_after_a_change_rebuilds_its_whole_path():
    fs = MemoryFS({"a.txt": "1"})
    store = StateStore()
    Builder(chain_project(), fs, store).build()
    fs.write_text("a.txt", "2")
    result = Builder(chain_project(), fs, store).build(["c"])
    assert result.ran == ["a", "b", "c"]
    assert fs.read_text("out/c") == "c(b(2))"
    assert fs.read_text("out/d") == "d(c(b(1)))"


def test_generated_headers_propagate_through_several_levels():
    fs = MemoryFS({"config.in": "debug=0", "main.c": "main"})
    project = Project()
    project.add("configure", copy_inputs, inputs=["config.in"], outputs=["gen/config.h"])
    project.add(
        "compile", wrap("cc"), inputs=["gen/config.h", "main.c"], outputs=["obj/main.o"]
    )
    project.add("link", wrap("ld"), deps=["compile"], outputs=["bin/app"])
    project.add("package", wrap("tar"), deps=["link"], outputs=["dist/app.tar"])
    builder = Builder(project, fs)
    builder.build()
    assert fs.read_text("dist/app.tar") == "tar(ld(cc(debug=0+main)))"
    fs.write_text("config.in", "debug=1")
    result = builder.build()
    assert result.ran == ["configure", "compile", "link", "package"]
    assert fs.read_text("dist/app.tar") == "tar(ld(cc(debug=1+main)))"


def test_chain_of_generated_files_without_explicit_deps():
    fs = MemoryFS({"words.txt": "alpha"})
    project = Project()
    project.add("stage1", copy_inputs, inputs=["words.txt"], outputs=["gen/1.txt"])
    project.add("stage2", wrap("s2"), inputs=["gen/1.txt"], outputs=["gen/2.txt"])
    project.add("stage3", wrap("s3"), inputs=["gen/2.txt"], outputs=["gen/3.txt"])
    project.add("stage4", wrap("s4"), inputs=["gen/3.txt"], outputs=["gen/4.txt"])
    builder = Builder(project, fs)
    builder.build()
    fs.write_text("words.txt", "beta")
    result = builder.build(["stage4"])
    assert result.ran == ["stage1", "stage2", "stage3", "stage4"]
    assert "beta" in fs.read_text("gen/4.txt")
    assert "alpha" not in fs.read_text("gen/4.txt")
