from src.builder import Builder
from src.fs import MemoryFS
from src.state import StateStore
from src.targets import Project


def collect(ctx):
    """Concatenate the notes with trailing whitespace stripped from every line."""
    lines = []
    for path in ctx.inputs:
        lines.extend(line.rstrip() for line in ctx.read_text(path).splitlines())
    ctx.write_text("build/all.md", "\n".join(lines) + "\n")


def render(ctx):
    lines = ctx.read_text("build/all.md").splitlines()
    ctx.write_text("build/all.html", "".join(f"<p>{line}</p>" for line in lines))


def package(ctx):
    ctx.write_text("dist/site.txt", "site:" + ctx.read_text("build/all.html"))


def site_project(collect_version="1"):
    project = Project()
    project.add(
        "collect",
        collect,
        inputs=["notes/*.md"],
        outputs=["build/all.md"],
        version=collect_version,
    )
    project.add("render", render, deps=["collect"], outputs=["build/all.html"])
    project.add("package", package, deps=["render"], outputs=["dist/site.txt"])
    return project


def site_fs():
    return MemoryFS({"notes/intro.md": "hello\n", "notes/usage.md": "usage\n"})


def test_identical_output_does_not_rebuild_downstream():
    fs = site_fs()
    builder = Builder(site_project(), fs)
    builder.build()
    fs.write_text("notes/intro.md", "hello   \n")
    result = builder.build()
    assert result.ran == ["collect"]
    assert result.skipped == ["render", "package"]
    assert builder.build().ran == []
    fs.write_text("notes/intro.md", "hello world\n")
    assert builder.build().ran == ["collect", "render", "package"]
    assert fs.read_text("dist/site.txt") == "site:<p>hello world</p><p>usage</p>"


def test_version_bump_with_identical_output_stops_at_the_target():
    fs = site_fs()
    store = StateStore()
    Builder(site_project(), fs, store).build()
    result = Builder(site_project(collect_version="2"), fs, store).build()
    assert result.ran == ["collect"]
    assert Builder(site_project(collect_version="2"), fs, store).build().ran == []


def test_regenerated_identical_file_does_not_rebuild_consumers():
    fs = MemoryFS({"schema.idl": "struct point { x y }", "main.c": "main"})

    def codegen(ctx):
        fields = ctx.read_text("schema.idl").split("{")[1].split("}")[0].split()
        ctx.write_text("gen/schema.h", "fields:" + ",".join(fields))

    def compile_(ctx):
        ctx.write_text("obj/main.o", ctx.read_text("gen/schema.h") + "|" + ctx.read_text("main.c"))

    def link(ctx):
        ctx.write_text("bin/app", "app[" + ctx.read_text("obj/main.o") + "]")

    project = Project()
    project.add("codegen", codegen, inputs=["schema.idl"], outputs=["gen/schema.h"])
    project.add("compile", compile_, inputs=["gen/schema.h", "main.c"], outputs=["obj/main.o"])
    project.add("link", link, deps=["compile"], outputs=["bin/app"])
    builder = Builder(project, fs)
    builder.build()

    fs.delete("gen/schema.h")
    assert builder.build().ran == ["codegen"]
    assert fs.read_text("gen/schema.h") == "fields:x,y"

    fs.write_text("schema.idl", "struct point {   x   y   }")
    assert builder.build().ran == ["codegen"]

    fs.write_text("schema.idl", "struct point { x y z }")
    assert builder.build().ran == ["codegen", "compile", "link"]
    assert fs.read_text("bin/app") == "app[fields:x,y,z|main]"


def test_cutoff_on_one_branch_still_rebuilds_the_other():
    fs = MemoryFS({"data.csv": "3,1,2"})

    def load(ctx):
        ctx.write_text("out/values", ctx.read_text("data.csv"))

    def count(ctx):
        ctx.write_text("out/count", str(len(ctx.read_text("out/values").split(","))))

    def total(ctx):
        ctx.write_text("out/total", str(sum(int(v) for v in ctx.read_text("out/values").split(","))))

    def summary(ctx):
        ctx.write_text(
            "out/summary", ctx.read_text("out/count") + " values, total " + ctx.read_text("out/total")
        )

    def badge(ctx):
        ctx.write_text("out/badge", "[" + ctx.read_text("out/count") + "]")

    project = Project()
    project.add("load", load, inputs=["data.csv"], outputs=["out/values"])
    project.add("count", count, deps=["load"], outputs=["out/count"])
    project.add("total", total, deps=["load"], outputs=["out/total"])
    project.add("summary", summary, deps=["count", "total"], outputs=["out/summary"])
    project.add("badge", badge, deps=["count"], outputs=["out/badge"])
    builder = Builder(project, fs)
    builder.build()

    fs.write_text("data.csv", "3,1,5")
    result = builder.build()
    assert result.ran == ["load", "count", "total", "summary"]
    assert result.skipped == ["badge"]
    assert fs.read_text("out/summary") == "3 values, total 9"
