from src.builder import Builder
from src.fs import MemoryFS
from src.state import StateStore
from src.targets import Project

STATE = ".build/state.json"


def collect(ctx):
    ctx.write_text("build/all.md", "".join(ctx.read_text(p) for p in ctx.inputs))


def render(ctx):
    lines = ctx.read_text("build/all.md").splitlines()
    ctx.write_text("build/all.html", "".join(f"<p>{line}</p>" for line in lines))


def package(ctx):
    ctx.write_text("dist/site.txt", "site:" + ctx.read_text("build/all.html"))


def collect_to(path):
    def action(ctx):
        ctx.write_text(path, "".join(ctx.read_text(p) for p in ctx.inputs))

    return action


def site_project():
    project = Project()
    project.add("collect", collect, inputs=["notes/*.md"], outputs=["build/all.md"])
    project.add("render", render, deps=["collect"], outputs=["build/all.html"])
    project.add("package", package, deps=["render"], outputs=["dist/site.txt"])
    return project


def site_fs():
    return MemoryFS({"notes/intro.md": "hello\n", "notes/usage.md": "usage\n"})


def test_building_a_subset_first_does_not_hide_stale_dependents():
    fs = site_fs()
    builder = Builder(site_project(), fs)
    builder.build()
    fs.write_text("notes/intro.md", "hello again\n")
    first = builder.build(["render"])
    assert first.ran == ["collect", "render"]
    second = builder.build()
    assert second.ran == ["package"]
    assert fs.read_text("dist/site.txt") == "site:<p>hello again</p><p>usage</p>"
    assert builder.build().ran == []


def test_saved_state_remembers_what_each_target_was_built_from():
    fs = site_fs()
    Builder(site_project(), fs, state_path=STATE).build()
    fs.write_text("notes/usage.md", "usage v2\n")
    assert Builder(site_project(), fs, state_path=STATE).build("render").ran == [
        "collect",
        "render",
    ]
    result = Builder(site_project(), fs, state_path=STATE).build()
    assert result.ran == ["package"]
    assert fs.read_text("dist/site.txt") == "site:<p>hello</p><p>usage v2</p>"
    assert Builder(site_project(), fs, state_path=STATE).build().ran == []


def test_second_consumer_of_a_rebuilt_library_is_rebuilt_later():
    def use(tag):
        def action(ctx):
            (lib,) = ctx.dependency_outputs("lib")
            ctx.write_text(ctx.outputs[0], tag + ":" + ctx.read_text(lib))

        return action

    fs = MemoryFS({"lib.src": "v1"})
    project = Project()
    project.add("lib", collect_to("out/lib"), inputs=["lib.src"], outputs=["out/lib"])
    project.add("tool", use("tool"), deps=["lib"], outputs=["out/tool"])
    project.add("server", use("server"), deps=["lib"], outputs=["out/server"])
    store = StateStore()
    Builder(project, fs, store).build()
    fs.write_text("lib.src", "v2")
    assert Builder(project, fs, store).build(["tool"]).ran == ["lib", "tool"]
    result = Builder(project, fs, store).build(["server"])
    assert result.ran == ["server"]
    assert fs.read_text("out/server") == "server:v2"
