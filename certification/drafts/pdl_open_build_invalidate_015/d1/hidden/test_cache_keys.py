"""Which cache entry a target may be restored from."""

from src.builder import Builder
from src.cache import ArtifactCache
from src.fs import MemoryFS
from src.targets import Project


def to_html(ctx):
    body = "".join(f"<p>{ctx.read_text(p).strip()}</p>" for p in ctx.inputs)
    ctx.write_text("dist/manual.html", "<html>" + body + "</html>")


def to_text(ctx):
    ctx.write_text("dist/manual.txt", "\n".join(ctx.read_text(p).strip() for p in ctx.inputs))


def manual_project():
    project = Project()
    project.add("manual-html", to_html, inputs=["manual/*.md"], outputs=["dist/manual.html"])
    project.add("manual-text", to_text, inputs=["manual/*.md"], outputs=["dist/manual.txt"])
    return project


def manual_fs():
    return MemoryFS({"manual/1-intro.md": "Intro\n", "manual/2-setup.md": "Setup\n"})


def test_targets_reading_the_same_files_get_their_own_outputs():
    """README: "Entries are keyed by the target's name, its declared outputs and its fingerprint, so two targets never share an entry." """
    fs = manual_fs()
    result = Builder(manual_project(), fs, cache=ArtifactCache(fs)).build()
    assert result.ran == ["manual-html", "manual-text"]
    assert result.restored == []
    assert fs.read_text("dist/manual.html") == "<html><p>Intro</p><p>Setup</p></html>"
    assert fs.read_text("dist/manual.txt") == "Intro\nSetup"


def test_each_target_is_restored_from_its_own_entry():
    """README: "Entries are keyed by the target's name, its declared outputs and its fingerprint, so two targets never share an entry." """
    shared = ArtifactCache(MemoryFS(), "cache")
    Builder(manual_project(), manual_fs(), cache=shared).build()
    fs = manual_fs()
    result = Builder(manual_project(), fs, cache=shared).build()
    assert result.restored == ["manual-html", "manual-text"]
    assert result.ran == []
    assert fs.read_text("dist/manual.html") == "<html><p>Intro</p><p>Setup</p></html>"
    assert fs.read_text("dist/manual.txt") == "Intro\nSetup"


def test_new_output_paths_are_not_filled_from_the_old_entry():
    """README: "Entries are keyed by the target's name, its declared outputs and its fingerprint, so two targets never share an entry."
    README: "A restored target must be indistinguishable from one whose action ran: its outputs have the same content, and its record describes what it was built from, discovered inputs included." """

    def stamp(ctx):
        for path in ctx.outputs:
            ctx.write_text(path, f"# {path}\n" + ctx.read_text("data.csv"))

    fs = MemoryFS({"data.csv": "1,2\n"})
    cache = ArtifactCache(fs)
    project = Project()
    project.add("export", stamp, inputs=["data.csv"], outputs=["out/v1.csv"])
    Builder(project, fs, cache=cache).build()
    project.replace("export", outputs=["out/v2.csv"])
    result = Builder(project, fs, cache=cache).build()
    assert result.ran == ["export"]
    assert fs.read_text("out/v2.csv") == "# out/v2.csv\n1,2\n"
