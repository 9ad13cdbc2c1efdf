"""Discovered (scanned) inputs and what survives between builders."""

from src.builder import Builder
from src.fs import MemoryFS
from src.state import StateStore
from src.targets import Project

STATE = ".build/state.json"


def compile_(ctx):
    """A tiny preprocessor: ``#include X`` pastes include/X, ``#include? X``
    pastes it only when it exists.  Blank lines and trailing blanks vanish."""
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
    kept = [line.rstrip() for line in lines if line.strip()]
    ctx.write_text("obj/main.o", "|".join(kept))


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


def firmware_fs(main="#include board.h\n#include? overrides.h\nmain();\n"):
    return MemoryFS(
        {
            "src/main.c": main,
            "include/board.h": "#define LEDS 4\n",
            "include/util.h": "#define MAX 9\n",
        }
    )


def test_new_process_rebuilds_after_a_scanned_header_changes():
    """README: "The state file records, for every target, what it was last built from, so that a new process picks up exactly where the previous one stopped." """
    fs = firmware_fs()
    Builder(firmware_project(), fs, state_path=STATE).build()
    fs.write_text("include/board.h", "#define LEDS 8\n")
    result = Builder(firmware_project(), fs, state_path=STATE).build()
    assert result.ran == ["compile", "link", "package"]
    assert fs.read_text("dist/fw.img") == "img:fw[#define LEDS 8|main();]"
    assert Builder(firmware_project(), fs, state_path=STATE).build().ran == []


def test_builders_sharing_a_store_see_scanned_headers():
    """README: "Several builders may also share one `StateStore` object; the store is the only memory builders have of earlier builds." """
    fs = firmware_fs()
    store = StateStore()
    Builder(firmware_project(), fs, store).build()
    fs.write_text("include/board.h", "#define LEDS 2\n")
    result = Builder(firmware_project(), fs, store).build()
    assert result.ran == ["compile", "link", "package"]
    assert fs.read_text("bin/fw") == "fw[#define LEDS 2|main();]"


def test_header_that_was_absent_is_noticed_by_a_new_process():
    """README: "A file it looked for and did not find is recorded as absent, so creating it later makes the target out of date."
    README: "The state file records, for every target, what it was last built from, so that a new process picks up exactly where the previous one stopped." """
    fs = firmware_fs()
    Builder(firmware_project(), fs, state_path=STATE).build()
    assert Builder(firmware_project(), fs, state_path=STATE).build().ran == []
    fs.write_text("include/overrides.h", "#define LEDS 1\n")
    result = Builder(firmware_project(), fs, state_path=STATE).build()
    assert result.ran == ["compile", "link", "package"]
    assert fs.read_text("obj/main.o") == "#define LEDS 4|#define LEDS 1|main();"


def test_header_change_with_identical_object_stops_at_compile_in_a_new_process():
    """README: "Nothing else does: in particular a dependency that was rebuilt but wrote byte-identical outputs does not make its dependents rerun (early cut-off)."
    README: "The state file records, for every target, what it was last built from, so that a new process picks up exactly where the previous one stopped." """
    fs = firmware_fs()
    Builder(firmware_project(), fs, state_path=STATE).build()
    fs.write_text("include/board.h", "\n#define LEDS 4   \n\n")
    result = Builder(firmware_project(), fs, state_path=STATE).build()
    assert result.ran == ["compile"]
    assert result.skipped == ["link", "package"]
    assert Builder(firmware_project(), fs, state_path=STATE).build().ran == []


def test_headers_the_action_stopped_including_are_forgotten():
    """README: "When the action runs again, the files it touches this time replace the previous set."
    README: "The state file records, for every target, what it was last built from, so that a new process picks up exactly where the previous one stopped." """
    fs = firmware_fs(main="#include board.h\n#include util.h\nmain();\n")
    Builder(firmware_project(), fs, state_path=STATE).build()
    fs.write_text("src/main.c", "#include util.h\nmain();\n")
    first = Builder(firmware_project(), fs, state_path=STATE).build()
    assert first.ran == ["compile", "link", "package"]
    fs.write_text("include/board.h", "#define LEDS 16\n")
    assert Builder(firmware_project(), fs, state_path=STATE).build().ran == []
    fs.write_text("include/util.h", "#define MAX 10\n")
    result = Builder(firmware_project(), fs, state_path=STATE).build()
    assert result.ran == ["compile", "link", "package"]
    assert fs.read_text("obj/main.o") == "#define MAX 10|main();"
