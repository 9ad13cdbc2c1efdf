"""The artifact cache and files discovered through ``scan``."""

from src.builder import Builder
from src.cache import ArtifactCache
from src.fs import MemoryFS
from src.targets import Project

STATE = ".build/state.json"


def compile_(ctx):
    """``#include X`` pastes include/X; ``#include? X`` only when it exists."""
    lines = []
    for line in ctx.read_text("src/main.c").splitlines():
        words = line.split()
        if words[:1] == ["#include"]:
            lines.extend(ctx.read_text("include/" + words[1]).splitlines())
        elif words[:1] == ["#include?"]:
            path = "include/" + words[1]
            if ctx.exists(path):
                lines.extend(ctx.read_text(path).splitlines())
        else:
            lines.append(line)
    ctx.write_text("obj/main.o", "|".join(line for line in lines if line.strip()))


def link(ctx):
    ctx.write_text("bin/fw", "fw[" + ctx.read_text("obj/main.o") + "]")


def package(ctx):
    ctx.write_text("dist/fw.img", "img:" + ctx.read_text("bin/fw"))


def firmware_project():
    project = Project()
    project.add(
        "compile",
        compile_,
        inputs=["src/main.c"],
        scan=["include/**"],
        outputs=["obj/main.o"],
    )
    project.add("link", link, deps=["compile"], outputs=["bin/fw"])
    project.add("package", package, deps=["link"], outputs=["dist/fw.img"])
    return project


def checkout(leds="4", **extra):
    files = {
        "src/main.c": "#include board.h\n#include? overrides.h\nmain();\n",
        "include/board.h": f"#define LEDS {leds}\n",
    }
    files.update(extra)
    return MemoryFS(files)


def test_header_only_change_is_not_served_from_the_cache():
    """README: "An entry is only used when every input its action discovered when the entry was stored still has the content it had then (absent files still absent); otherwise the action runs." """
    fs = checkout()
    builder = Builder(firmware_project(), fs, cache=ArtifactCache(fs))
    builder.build()
    fs.write_text("include/board.h", "#define LEDS 8\n")
    result = builder.build()
    assert result.ran == ["compile", "link", "package"]
    assert result.restored == []
    assert fs.read_text("dist/fw.img") == "img:fw[#define LEDS 8|main();]"
    assert builder.build().up_to_date


def test_checkouts_with_different_headers_share_a_cache_safely():
    """README: "Storing an entry replaces any entry stored under the same key."
    README: "An entry is only used when every input its action discovered when the entry was stored still has the content it had then (absent files still absent); otherwise the action runs." """
    shared = ArtifactCache(MemoryFS(), "cache")
    first = checkout("4")
    Builder(firmware_project(), first, cache=shared).build()

    second = checkout("6")
    result = Builder(firmware_project(), second, cache=shared).build()
    assert result.ran == ["compile", "link", "package"]
    assert second.read_text("dist/fw.img") == "img:fw[#define LEDS 6|main();]"

    third = checkout("4")
    result = Builder(firmware_project(), third, cache=shared).build()
    assert result.ran == ["compile"]
    assert result.restored == ["link", "package"]
    assert third.read_text("dist/fw.img") == "img:fw[#define LEDS 4|main();]"


def test_present_file_that_was_absent_for_the_entry_prevents_a_restore():
    """README: "An entry is only used when every input its action discovered when the entry was stored still has the content it had then (absent files still absent); otherwise the action runs." """
    shared = ArtifactCache(MemoryFS(), "cache")
    Builder(firmware_project(), checkout(), cache=shared).build()
    other = checkout(**{"include/overrides.h": "#define LEDS 1\n"})
    result = Builder(firmware_project(), other, cache=shared).build()
    assert result.restored == []
    assert result.ran == ["compile", "link", "package"]
    assert other.read_text("obj/main.o") == "#define LEDS 4|#define LEDS 1|main();"


def test_restored_target_notices_later_header_edits():
    """README: "A restored target must be indistinguishable from one whose action ran: its outputs have the same content, and its record describes what it was built from, discovered inputs included." """
    shared = ArtifactCache(MemoryFS(), "cache")
    Builder(firmware_project(), checkout(), cache=shared).build()
    fs = checkout()
    builder = Builder(firmware_project(), fs, cache=shared)
    assert builder.build().restored == ["compile", "link", "package"]
    fs.write_text("include/board.h", "#define LEDS 12\n")
    result = builder.build()
    assert result.ran == ["compile", "link", "package"]
    assert fs.read_text("dist/fw.img") == "img:fw[#define LEDS 12|main();]"
    fs.write_text("include/overrides.h", "#define LEDS 3\n")
    assert builder.build().ran == ["compile", "link", "package"]


def test_restored_targets_discovered_inputs_reach_the_state_file():
    """README: "The state file records, for every target, what it was last built from, so that a new process picks up exactly where the previous one stopped."
    README: "A restored target must be indistinguishable from one whose action ran: its outputs have the same content, and its record describes what it was built from, discovered inputs included." """
    shared_fs = MemoryFS()
    Builder(firmware_project(), checkout(), cache=ArtifactCache(shared_fs, "c")).build()
    fs = checkout()
    result = Builder(
        firmware_project(), fs, state_path=STATE, cache=ArtifactCache(shared_fs, "c")
    ).build()
    assert result.restored == ["compile", "link", "package"]
    fs.write_text("include/overrides.h", "#define LEDS 5\n")
    again = Builder(
        firmware_project(), fs, state_path=STATE, cache=ArtifactCache(shared_fs, "c")
    ).build()
    assert again.ran == ["compile", "link", "package"]
    assert fs.read_text("bin/fw") == "fw[#define LEDS 4|#define LEDS 5|main();]"
