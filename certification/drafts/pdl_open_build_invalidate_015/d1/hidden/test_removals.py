"""Things that disappear: matched files, declared inputs, dependencies."""

from src.builder import Builder
from src.cache import ArtifactCache
from src.fs import MemoryFS
from src.state import StateStore
from src.targets import Project

STATE = ".build/state.json"


def concat(ctx):
    ctx.write_text(ctx.outputs[0], "".join(ctx.read_text(p) for p in ctx.inputs))


def join_dependencies(ctx):
    parts = []
    for dep in ctx.dependencies:
        for path in ctx.dependency_outputs(dep):
            parts.append(ctx.read_text(path))
    ctx.write_text(ctx.outputs[0], "+".join(parts))


def manual_project():
    project = Project()
    project.add("chapters", concat, inputs=["manual/*.md"], outputs=["build/manual.md"])
    project.add("render", join_dependencies, deps=["chapters"], outputs=["build/manual.html"])
    project.add("package", join_dependencies, deps=["render"], outputs=["dist/manual.zip"])
    return project


def manual_fs():
    return MemoryFS({"manual/1-intro.md": "intro\n", "manual/2-setup.md": "setup\n"})


def test_deleted_chapter_disappears_from_every_output():
    """Issue: "When a chapter is deleted from `manual/`, its text stays in `build/manual.md` and in everything made from it." """
    fs = manual_fs()
    builder = Builder(manual_project(), fs, state_path=STATE)
    builder.build()
    fs.delete("manual/2-setup.md")
    result = builder.build()
    assert result.ran == ["chapters", "render", "package"]
    assert fs.read_text("dist/manual.zip") == "intro\n"
    assert Builder(manual_project(), fs, state_path=STATE).build().ran == []


def test_dropping_an_input_from_a_definition_rebuilds_the_target():
    """README: "A target is out of date when anything it was built from differs from its last successful build: its version, the set of files its inputs resolve to and their contents, the set of targets it depends on and the outputs they currently have, or a file its action discovered through `scan`." """
    fs = MemoryFS({"a.txt": "A", "b.txt": "B"})
    store = StateStore()
    project = Project()
    project.add("bundle", concat, inputs=["a.txt", "b.txt"], outputs=["bundle.txt"])
    Builder(project, fs, store).build()
    project.replace("bundle", inputs=["a.txt"])
    result = Builder(project, fs, store).build()
    assert result.ran == ["bundle"]
    assert fs.read_text("bundle.txt") == "A"


def library_project(app_deps):
    project = Project()
    project.add("core", concat, inputs=["core.txt"], outputs=["out/core"])
    project.add("legacy", concat, inputs=["legacy.txt"], outputs=["out/legacy"])
    project.add("app", join_dependencies, deps=app_deps, outputs=["out/app"])
    return project


def test_dropping_a_dependency_rebuilds_the_target():
    """README: "A target is out of date when anything it was built from differs from its last successful build: its version, the set of files its inputs resolve to and their contents, the set of targets it depends on and the outputs they currently have, or a file its action discovered through `scan`." """
    fs = MemoryFS({"core.txt": "core", "legacy.txt": "legacy"})
    Builder(library_project(["core", "legacy"]), fs, state_path=STATE).build()
    assert fs.read_text("out/app") == "core+legacy"
    result = Builder(library_project(["core"]), fs, state_path=STATE).build()
    assert result.ran == ["app"]
    assert fs.read_text("out/app") == "core"


def test_deleting_an_added_chapter_restores_the_earlier_outputs_from_the_cache():
    """README: "A `Builder` given an `ArtifactCache` looks there before running an out of date target; a hit writes the cached outputs instead of running the action, and every action that succeeds is stored."
    README: "A target is out of date when anything it was built from differs from its last successful build: its version, the set of files its inputs resolve to and their contents, the set of targets it depends on and the outputs they currently have, or a file its action discovered through `scan`." """
    fs = manual_fs()
    builder = Builder(manual_project(), fs, cache=ArtifactCache(fs))
    builder.build()
    fs.write_text("manual/3-faq.md", "faq\n")
    assert builder.build().ran == ["chapters", "render", "package"]
    fs.delete("manual/3-faq.md")
    result = builder.build()
    assert result.ran == []
    assert result.restored == ["chapters", "render", "package"]
    assert fs.read_text("dist/manual.zip") == "intro\nsetup\n"
