from src.builder import Builder
from src.fs import MemoryFS
from src.state import StateStore
from src.targets import Project


def concat(ctx):
    ctx.write_text(ctx.outputs[0], "".join(ctx.read_text(p) for p in ctx.inputs))


def join_dependencies(ctx):
    parts = []
    for dep in ctx.dependencies:
        for path in ctx.dependency_outputs(dep):
            parts.append(ctx.read_text(path))
    ctx.write_text(ctx.outputs[0], "+".join(parts))


def test_deleting_a_matched_file_rebuilds_everything_downstream():
    fs = MemoryFS({"notes/intro.md": "hello\n", "notes/usage.md": "usage\n"})
    project = Project()
    project.add("collect", concat, inputs=["notes/*.md"], outputs=["build/all.md"])
    project.add("render", join_dependencies, deps=["collect"], outputs=["build/all.html"])
    project.add("package", join_dependencies, deps=["render"], outputs=["dist/site.txt"])
    builder = Builder(project, fs)
    builder.build()
    fs.delete("notes/usage.md")
    result = builder.build()
    assert result.ran == ["collect", "render", "package"]
    assert fs.read_text("dist/site.txt") == "hello\n"
    assert builder.build().ran == []


def test_dropping_an_input_from_a_definition_rebuilds_the_target():
    fs = MemoryFS({"a.txt": "A", "b.txt": "B"})
    store = StateStore()
    before = Project()
    before.add("bundle", concat, inputs=["a.txt", "b.txt"], outputs=["bundle.txt"])
    Builder(before, fs, store).build()

    after = Project()
    after.add("bundle", concat, inputs=["a.txt"], outputs=["bundle.txt"])
    result = Builder(after, fs, store).build()
    assert result.ran == ["bundle"]
    assert fs.read_text("bundle.txt") == "A"


def library_project(app_deps):
    project = Project()
    project.add("core", concat, inputs=["core.txt"], outputs=["out/core"])
    project.add("legacy", concat, inputs=["legacy.txt"], outputs=["out/legacy"])
    project.add("extra", concat, inputs=["extra.txt"], outputs=["out/extra"])
    project.add("app", join_dependencies, deps=app_deps, outputs=["out/app"])
    return project


def library_fs():
    return MemoryFS({"core.txt": "core", "legacy.txt": "legacy", "extra.txt": "extra"})


def test_dropping_a_dependency_rebuilds_the_target():
    fs = library_fs()
    store = StateStore()
    Builder(library_project(["core", "legacy"]), fs, store).build()
    assert fs.read_text("out/app") == "core+legacy"
    result = Builder(library_project(["core"]), fs, store).build()
    assert result.ran == ["app"]
    assert fs.read_text("out/app") == "core"


def test_adding_a_dependency_on_an_already_built_target_rebuilds():
    fs = library_fs()
    store = StateStore()
    Builder(library_project(["core"]), fs, store).build()
    assert fs.read_text("out/app") == "core"
    result = Builder(library_project(["core", "extra"]), fs, store).build()
    assert result.ran == ["app"]
    assert fs.read_text("out/app") == "core+extra"
