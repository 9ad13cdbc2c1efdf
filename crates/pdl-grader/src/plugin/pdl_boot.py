"""The trusted start of every pdl-swe test run.

The harness runs ``python pdl_boot.py`` inside the sandbox, with the run's
configuration on standard input and the write end of a pipe (the outcome
channel) on an inherited descriptor. Before any code of the graded repository is
imported, this file:

1. reads the configuration to its end and closes standard input;
2. makes the process non-dumpable, so that no other process of the sandbox user
   can read or write its memory through /proc or ptrace;
3. imports pytest and pluggy and records the identity of every function, class
   and module entry of their machinery and of the builtins (the baseline);
4. starts three generators that keep what an attacker would want out of reach of
   Python introspection. A suspended generator's frame is reachable only through
   ``gi_frame`` or the garbage collector's object graph, and the audit hook
   refuses both for these generators:

   - the *vault* holds the run's MAC key and the sequence number, and signs a
     digest only when the guardian's own frame asks;
   - the *guardian* turns pytest's hook calls into outcome events. It takes no
     data from whoever ticks it: it reads the stack itself, checks that the tick
     came from this file's plugin, called through pluggy by the pytest function
     that calls that hook, that pytest's machinery is unchanged, and derives the
     event from pytest's own objects;
   - the *auditor* is called by a PEP 578 audit hook (which Python code cannot
     remove) and refuses the primitives that could reach the other two: the
     collector's object graph, their frames, ctypes, /proc/*/mem and
     descriptors, tracing and profiling, further audit hooks, function and code
     surgery on test files.

In the run of the hidden tests (the public tests run before, in a tree
without them), the audit hook also refuses code of the repository that opens or
lists a hidden test module (``_hidden_guard``): the hidden tests' source stays
out of its reach wherever Python sees the read.

Events are written to the outcome descriptor as ``<json>\\t<hex mac>`` lines; the
mac is HMAC-SHA256 over the line's sequence number and the SHA-256 of its JSON. A
breach seen by the auditor or the guardian is written as an unsigned ``ABORT``
line, which the harness reads as tampering. When pytest returns, its exit status
is signed into a ``finish`` event and the process ends with ``os._exit``: exit
handlers registered by the code under test never run.

The guardian, the vault and the auditor look up no global name: every function
they call is handed to them when they start (a unit test checks their bytecode),
so rebinding a builtin or a module attribute puts no foreign code on their stack.
"""

import os
import sys


def _sha256_constructor():
    """SHA-256 from the smallest module that has it (OpenSSL's costs a few
    milliseconds to load)."""
    try:
        from _sha2 import sha256  # Python 3.12 and later
    except ImportError:
        try:
            from _sha256 import sha256  # Python 3.11 and earlier
        except ImportError:
            from _hashlib import openssl_sha256 as sha256
    return sha256


def _read_config():
    chunks = []
    while True:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    import json

    return json.loads(b"".join(chunks).decode("utf-8"))


def _not_dumpable():
    """PR_SET_DUMPABLE = 0: /proc/<pid>/mem, /proc/<pid>/fd and ptrace of this
    process become unavailable to every other process of the sandbox."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(4, 0, 0, 0, 0) == 0
    except Exception:
        return False


def _import_machinery():
    """Imports pytest with every module it uses while it runs (its default
    plugins and their helpers), so that the baseline covers them all."""
    import importlib

    import _pytest.config
    import pluggy  # noqa: F401
    import pytest  # noqa: F401

    for name in _pytest.config.default_plugins + ("_argcomplete",):
        try:
            importlib.import_module("_pytest." + name)
        except Exception:
            pass


# Module globals pytest itself rebinds while it runs.
_MUTABLE_GLOBALS = frozenset(
    (
        "_pytest.assertion.util._reprcompare",
        "_pytest.assertion.util._assertion_pass",
        "_pytest.assertion.util._config",
        "builtins._",
    )
)

# Entries pytest itself adds or rebinds after start-up: the legacy-path
# plugin's properties and methods ("legacy": the new value must be code of
# _pytest/legacypath.py), a warning flag ("flag": a bool), gettext's ``_``.
_CHANGED_LATER = {
    "builtins": {"_": "any"},
    "_pytest.config.Config": {
        "invocation_dir": "legacy",
        "inifile": "legacy",
        "rootdir": "legacy",
        "_getini_unknown_type": "legacy",
    },
    "_pytest.nodes.Node": {"fspath": "legacy"},
    "_pytest.main.Session": {"startdir": "legacy"},
    "_pytest.fixtures.FixtureRequest": {"fspath": "legacy"},
    "_pytest.cacheprovider.Cache": {"makedir": "legacy"},
    "_pytest.terminal.TerminalReporter": {"startdir": "legacy"},
    "_pytest.python.Function": {"_pytest_diamond_inheritance_warning_shown": "flag"},
    "_pytest.python.FunctionDefinition": {"_pytest_diamond_inheritance_warning_shown": "flag"},
}


# The breach the hidden-source guard reports (through the auditor, as a refused
# event of its own).
_HIDDEN_READ = "the hidden tests' source, reached by code of the repository"

# Audit events the auditor acts on: the refused ones, and those it looks into.
_REFUSED_EVENTS = (
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "sys._current_frames",
    "sys.settrace",
    "sys.setprofile",
    "sys.addaudithook",
    "ctypes.dlopen",
    "ctypes.dlsym",
    "ctypes.dlsym/handle",
    "ctypes.cdata",
    "ctypes.cdata/buffer",
    "ctypes.string_at",
    "ctypes.wstring_at",
    "ctypes.call_function",
    "ctypes.addressof",
    "ctypes.PyObj_FromPtr",
    "ctypes.set_errno",
    "ctypes.get_errno",
    "ctypes.set_last_error",
    "ctypes.get_last_error",
    "ctypes.create_string_buffer",
    "ctypes.create_unicode_buffer",
    "cpython._PySys_ClearAuditHooks",
    "cpython.PyInterpreterState_Clear",
    _HIDDEN_READ,
)
_WATCHED_EVENTS = frozenset(
    _REFUSED_EVENTS
    + (
        "object.__getattr__",
        "object.__setattr__",
        "code.__new__",
        "compile",
        "open",
        "marshal.load",
        "marshal.loads",
        "import",
    )
)
# Attributes that lead to a generator's or coroutine's frame.
_FRAME_ATTRIBUTES = ("gi_frame", "cr_frame", "ag_frame")


def _baseline():
    """What the guardian watches: for each module dict and class dict of the
    machinery, (label, live mapping, keys, values, length, every key, names
    pytest changes later, the values at start). The identity of functions, classes, modules, descriptors
    and builtins is recorded (data such as counters and caches may change
    honestly), and the length of each dict, so that an added entry (a global
    shadowing a builtin, a property shadowing an instance field) shows too."""
    import types

    kinds = (
        types.FunctionType,
        types.BuiltinFunctionType,
        types.MethodType,
        types.ModuleType,
        type,
        classmethod,
        staticmethod,
        property,
        types.MethodDescriptorType,
        types.WrapperDescriptorType,
        types.GetSetDescriptorType,
        types.MemberDescriptorType,
    )
    scalars = (int, float, str, bool, bytes)
    mutable = {}
    for dotted in _MUTABLE_GLOBALS:
        module_name, _, global_name = dotted.rpartition(".")
        mutable.setdefault(module_name, set()).add(global_name)
    entries = []
    classes = []
    seen = set()
    for name, module in sorted(sys.modules.items()):
        if module is None:
            continue
        if not (name in ("pytest", "builtins") or name.startswith(("_pytest", "pluggy"))):
            continue
        table = module.__dict__
        skip = mutable.get(name, ())
        keys = tuple([k for k, v in table.items() if type(k) is str and isinstance(v, kinds) and k not in skip])
        # The values now and the values at start: the same objects, one tuple.
        values = tuple([table[k] for k in keys])
        entries.append((name, table, keys, values, len(table), frozenset(table), _CHANGED_LATER.get(name, {}), values))
        if name == "builtins":
            continue
        for v in list(table.values()):
            if isinstance(v, type) and getattr(v, "__module__", None) == name and id(v) not in seen:
                seen.add(id(v))
                classes.append(v)
                proxy = v.__dict__
                # A class's scalar settings too (approx's default tolerances):
                # pytest never changes them while it runs.
                ckeys = tuple([k for k, cv in proxy.items() if isinstance(cv, kinds) or type(cv) in scalars])
                cvalues = tuple([proxy[k] for k in ckeys])
                label = name + "." + v.__qualname__
                entries.append(
                    (label, proxy, ckeys, cvalues, len(proxy), frozenset(proxy), _CHANGED_LATER.get(label, {}), cvalues)
                )
    return tuple(entries), frozenset(classes)


def _codes_of(obj, out):
    """Every code object of a function or class, nested ones included."""
    import types

    stack = []
    if isinstance(obj, types.FunctionType):
        stack.append(obj.__code__)
    elif isinstance(obj, type):
        for v in obj.__dict__.values():
            if isinstance(v, (staticmethod, classmethod)):
                v = v.__func__
            if isinstance(v, property):
                stack.extend(f.__code__ for f in (v.fget, v.fset, v.fdel) if isinstance(f, types.FunctionType))
            if isinstance(v, types.FunctionType):
                stack.append(v.__code__)
    while stack:
        code = stack.pop()
        out.add(code)
        stack.extend(c for c in code.co_consts if isinstance(c, types.CodeType))


def _module_codes(module):
    out = set()
    for v in list(module.__dict__.values()):
        if getattr(v, "__module__", None) == module.__name__:
            _codes_of(v, out)
    return out


# ---------------------------------------------------------------------------
# The three generators. They use no global name: everything they call arrives
# with their first send (checked by the grader's unit tests).
# ---------------------------------------------------------------------------


def _vault():
    key, owner, chain, getframe, sha256, type_, bytes_type, tuple_type, length = yield
    signer, emitter, handler = chain
    # HMAC-SHA256 (RFC 2104) from the two padded keys; the key itself goes.
    block = key + b"\x00" * (64 - length(key))
    inner = sha256(bytes_type(b ^ 0x36 for b in block))
    outer = sha256(bytes_type(b ^ 0x5C for b in block))
    del key, block
    seq = 0
    poisoned = False
    out = None
    while True:
        messages = yield out
        caller = getframe(1)
        if (
            poisoned
            or caller.f_code is not signer
            or caller.f_back.f_code is not emitter
            or caller.f_back.f_back.f_code is not handler
            or caller.f_back.f_back.f_back is not owner
            or type_(messages) is not tuple_type
        ):
            # Whoever asks without being the guardian spoils every later line.
            poisoned = True
            out = ()
            continue
        macs = []
        for message in messages:
            if type_(message) is not bytes_type or length(message) != 32:
                poisoned = True
                macs = []
                break
            digest = inner.copy()
            digest.update(seq.to_bytes(8, "big") + message)
            mac = outer.copy()
            mac.update(digest.digest())
            macs.append(mac.digest())
            seq += 1
        out = tuple_type(macs)


def _auditor():
    (
        fd,
        write,
        guarded,
        watched_files,
        type_,
        str_type,
        tuple_type,
        encode,
        exception_type,
        refused,
        frame_names,
        length,
        bytes_type,
        foreign_event,
        native_dirs,
        exec_event,
        loader_codes,
        test_modules,
        module_type,
        code_type,
        open_,
        compile_,
        internal_modules,
        zip_,
    ) = yield
    rewrite_exec, frames_removed, loader_exec = loader_codes

    def same_code(found, expected):
        # The same bytecode, names and constants, nested code included.
        pairs = [(found, expected)]
        while pairs:
            a, b = pairs.pop()
            if type_(a) is not code_type or type_(b) is not code_type:
                return False
            if a.co_code != b.co_code or a.co_names != b.co_names or length(a.co_consts) != length(b.co_consts):
                return False
            for x, y in zip_(a.co_consts, b.co_consts):
                if type_(x) is code_type or type_(y) is code_type:
                    pairs.append((x, y))
        return True

    compiled = {}
    executed = {}
    aborted = False
    verdict = None
    surgery = ("__code__",)
    first, second, third = guarded
    # The test files' paths as they appear inside marshalled code.
    encoded_files = tuple_type(path.encode("utf-8", "surrogatepass") for path in watched_files)
    while True:
        event = yield verdict
        verdict = None
        if type_(event) is not tuple_type:
            continue
        name = event[0]
        args = event[1]
        reason = None
        # Nothing here hashes or compares an object the run made (its
        # __hash__ or __eq__ would run inside the auditor): identities, and
        # membership only for exact strs.
        if type_(name) is not str_type or type_(args) is not tuple_type:
            reason = "a malformed audit event"
        elif name is exec_event:
            # A test file's module code is executed once, by pytest's loader,
            # into the module it imports: that module (and its code) is the
            # only one the guardian accepts tests from.
            code, frame = args
            path = code.co_filename
            count = executed.get(path, 0) + 1
            executed[path] = count
            if count > 1:
                reason = "a test file executed twice"
            else:
                # pytest's rewriting loader, or importlib's own source loader
                # (through its frame-hiding helper) when rewriting is off.
                module = None
                if frame.f_code is rewrite_exec:
                    module = frame.f_locals.get("module")
                elif frame.f_code is frames_removed:
                    loader = frame.f_back
                    if loader is not None and loader.f_code is loader_exec:
                        module = loader.f_locals.get("module")
                        # The code is exactly what the file's source compiles
                        # to, asserts kept: nothing changed how it was compiled.
                        with open_(path, "rb") as handle:
                            expected = compile_(handle.read(), path, "exec", 0, True, 0)
                        if not same_code(code, expected):
                            reason = "a test file whose code is not its source's (asserts removed?)"
                            module = None
                if type_(module) is module_type:
                    test_modules[path] = (module, code)
        elif name is foreign_event:
            # The audit hook saw code of the run reach for frames while the
            # guardian was running: a finalizer, a signal handler or a weak
            # reference callback that ran inside it.
            reason = "code of the run inside the grader's checks"
        elif name in refused:
            reason = name
        elif name == "object.__getattr__":
            if length(args) < 2:
                reason = "a malformed audit event"
            else:
                target = args[0]
                if (target is first or target is second or target is third) and (
                    type_(args[1]) is not str_type or args[1] in frame_names
                ):
                    reason = "the frame of the grader"
        elif name == "object.__setattr__":
            if length(args) < 2 or type_(args[1]) is not str_type or args[1] in surgery:
                reason = "function surgery"
        elif name == "code.__new__":
            if length(args) < 2 or type_(args[1]) is not str_type or args[1] in watched_files:
                reason = "a code object forged for a test file"
        elif name == "marshal.load":
            reason = "code read from a marshalled file"
        elif name == "marshal.loads":
            data = args[0] if length(args) > 0 else None
            if type_(data) is not bytes_type:
                reason = "marshalled code of an unknown kind"
            else:
                for path in encoded_files:
                    if path in data:
                        reason = "marshalled code naming a test file"
                        break
        elif name == "compile":
            filename = args[1] if length(args) > 1 else None
            if type_(filename) is str_type and filename in watched_files:
                n = compiled.get(filename, 0) + 1
                compiled[filename] = n
                if n > 1:
                    reason = "a test file compiled twice"
        elif name == "import":
            # CPython's own test modules reach the interpreter's internals
            # (its configuration: stripping asserts from test files compiled
            # later); no honest test run imports them.
            module_name = args[0] if length(args) > 0 else None
            # An extension module is loaded from a file only through this
            # event; its path must lie in the environment or the interpreter's
            # own folders (read-only, so no link of the run's making is there).
            path = args[1] if length(args) > 1 else None
            if type_(module_name) is not str_type:
                reason = "a module imported under a name of the wrong type"
            elif module_name.startswith(internal_modules):
                reason = "CPython's internal test module " + module_name[:40]
            elif path is not None:
                if type_(path) is not str_type:
                    reason = "a module loaded from a path of the wrong type"
                elif not path.startswith(native_dirs) or "/../" in path or "/./" in path or "//" in path:
                    reason = "native code loaded from outside the environment (" + path[:60] + ")"
        elif name == "open":
            path = args[0] if length(args) > 0 else None
            if type_(path) is bytes_type:
                path = path.decode("utf-8", "surrogateescape")
            if type_(path) is str_type and (path.startswith("/proc/") or path.startswith("/dev/fd")):
                if (
                    path.startswith("/dev/fd")
                    or path.endswith("/mem")
                    or path.endswith("/pagemap")
                    or "/fd" in path
                    or "/map_files" in path
                    or "/task/" in path
                ):
                    reason = "process memory or descriptors (" + path[:60] + ")"
        if reason is not None:
            if not aborted:
                aborted = True
                try:
                    write(fd, b"ABORT " + encode(reason).encode("ascii") + b"\n")
                except exception_type:
                    pass
            verdict = reason


def _hidden_paths(root, hidden, realpath, join):
    """What the hidden-source guard protects: the real paths of the hidden
    test modules and of the folders that hold them (``tests/hidden`` and
    below), and every trailing run of their components (a path opened
    relative to a folder descriptor arrives as such a tail)."""
    targets = set()
    tails = set()
    for rel in hidden:
        if not rel.endswith(".py"):
            continue
        parts = rel.split("/")
        for end in range(2, len(parts) + 1):
            targets.add(realpath(join(root, *parts[:end])))
            for start in range(end):
                tails.add("/".join(parts[start:end]))
    return frozenset(targets), frozenset(tails)


def _hidden_guard(
    root, modules, targets, tails, realpath, normpath, join, getcwd, getframe, type_, str_, bytes_, errors
):
    """The check of every open and folder listing in a run of the hidden
    tests: it is a breach when the path is a hidden test module or one of its
    folders and a frame of the repository's code is on the stack. pytest's
    collection and import of those modules, and the hidden tests' own code,
    read them with no such frame. Data files beside the hidden tests are not
    guarded: the hidden tests hand them to the code under test."""
    root_slash = root.rstrip("/") + "/"

    def repository_code(filename):
        if type_(filename) is not str_:
            return True
        if filename.startswith(root_slash):
            return filename not in modules
        # Code compiled by the run under a made-up relative name; the
        # interpreter's own ("<frozen ...>", "<string>") are not.
        return not filename.startswith("/") and not filename.startswith("<")

    def guarded(path):
        if type_(path) is bytes_:
            path = path.decode("utf-8", "surrogateescape")
        if type_(path) is not str_:
            return False
        try:
            if path.startswith("/"):
                return realpath(path) in targets
            if normpath(path) in tails:
                return True
            return realpath(join(getcwd(), path)) in targets
        except errors:
            return False

    def check(path):
        if not guarded(path):
            return False
        frame = getframe(1)
        while frame is not None:
            if repository_code(frame.f_code.co_filename):
                return True
            frame = frame.f_back
        return False

    return check


def _guardian():
    (
        vault_send,
        auditor_send,
        fd,
        write,
        sha256,
        getframe,
        encode,
        baseline,
        genuine_classes,
        genuine_modules,
        pluggy_codes,
        boot_codes,
        our_codes,
        callers,
        classes,
        conftests,
        test_files,
        collect_mode,
        builtins_,
    ) = yield
    (
        type_,
        str_type,
        int_type,
        bool_type,
        list_type,
        tuple_type,
        dict_type,
        module_type,
        function_type,
        method_type,
        property_type,
        staticmethod_type,
        classmethod_type,
        exception_type,
        length,
        range_,
        list_,
        all_,
        map_,
        is_,
        eq,
        zip_,
        error_names,
        abc_meta,
        repeat,
        getsizeof,
        itemgetter,
        call_getter,
        chain,
        open_,
        gc_disable,
        gc_enable,
        gc_isenabled,
        getsignal,
        setsignal,
        valid_signals,
        sig_ign,
        main_ident,
        get_ident,
        legacy_codes,
        permit,
        test_modules,
        code_type,
    ) = builtins_
    (
        report_class,
        function_class,
        session_class,
        config_class,
        callinfo_class,
        module_node_class,
        collect_report_class,
        plugin_manager_class,
        hook_relay_class,
        hook_caller_classes,
        hook_impl_class,
        our_plugin_class,
    ) = classes
    handlers = {}
    for signum in valid_signals():
        try:
            handlers[signum] = getsignal(signum)
        except exception_type:
            pass
    signal_numbers = tuple_type(handlers)
    signal_originals = tuple_type(handlers[signum] for signum in signal_numbers)
    state = "boot"
    config = None
    pm = None
    relay = None
    plugins = {}
    hook_impls = {}
    items = ()
    index = -1
    phases = ("setup", "call", "teardown")
    next_phase = 0
    observed = {}
    test_tables = ()
    test_objects = ()
    pending = []
    aborted = False
    # What a test's body may use (checked just before and after it runs) and
    # the narrower set on the path from a test's result to its report.
    test_prefixes = (
        "_pytest.runner",
        "_pytest.reports",
        "_pytest.python",
        "_pytest.nodes",
        "_pytest.skipping",
        "_pytest.outcomes",
        "_pytest.main",
        "_pytest.fixtures",
        "_pytest.mark",
        "_pytest.monkeypatch",
        "_pytest.recwarn",
        "_pytest.warnings",
        "_pytest.logging",
        "_pytest.capture",
        "_pytest.tmpdir",
        "_pytest.assertion",
        "_pytest._code",
        "_pytest.compat",
        "_pytest.threadexception",
        "_pytest.unraisableexception",
        "_pytest.unittest",
        "pytest",
        "pluggy",
        "builtins",
    )
    report_prefixes = (
        "_pytest.runner",
        "_pytest.reports",
        "_pytest.python",
        "_pytest.nodes",
        "_pytest.skipping",
        "_pytest.outcomes",
        "_pytest._code",
        "pluggy",
        "builtins",
    )
    runtest_hooks = (
        "pytest_runtest_setup",
        "pytest_runtest_call",
        "pytest_runtest_teardown",
        "pytest_runtest_makereport",
        "pytest_runtest_logreport",
        "pytest_pyfunc_call",
        "pytest_runtest_logstart",
        "pytest_runtest_logfinish",
        "pytest_runtest_protocol",
        "pytest_report_teststatus",
        "pytest_fixture_setup",
        "pytest_exception_interact",
    )
    hot_hooks = runtest_hooks + (
        "pytest_collection_modifyitems",
        "pytest_collection_finish",
        "pytest_collectreport",
        "pytest_make_collect_report",
        "pytest_pycollect_makeitem",
        "pytest_pycollect_makemodule",
        "pytest_collect_file",
        "pytest_generate_tests",
        "pytest_itemcollected",
        "pytest_sessionfinish",
        "pytest_terminal_summary",
    )

    def flatten(entries):
        # One item getter per table (a key twice where there is one, so that
        # every getter returns a tuple) and every value they must return.
        getters = []
        tables = []
        values = []
        for entry in entries:
            keys = entry[2]
            if length(keys) == 0:
                continue
            if length(keys) == 1:
                keys = keys + keys
                values.extend(entry[3] + entry[3])
            else:
                values.extend(entry[3])
            getters.append(itemgetter(*keys))
            tables.append(entry[1])
        # The byte size of every module table (its layout changes when a key
        # that is not an exact str goes in, and stays changed): checked before
        # any lookup, so that no lookup can meet such a key.
        plain = tuple_type(e[1] for e in entries if type_(e[1]) is dict_type)
        return (
            entries,
            tuple_type(getters),
            tuple_type(tables),
            tuple_type(values),
            tuple_type(e[1] for e in entries),
            tuple_type(e[4] for e in entries),
            plain,
            tuple_type(map_(getsizeof, plain)),
        )

    scopes = {}

    def rebuild():
        scopes["all"] = flatten(baseline)
        scopes["test"] = flatten(tuple_type(e for e in baseline if e[0].startswith(test_prefixes)))
        scopes["report"] = flatten(tuple_type(e for e in baseline if e[0].startswith(report_prefixes)))

    def abort(reason):
        nonlocal aborted
        if not aborted:
            aborted = True
            try:
                write(fd, b"ABORT " + encode(reason).encode("ascii") + b"\n")
            except exception_type:
                pass
        return False

    def label(value):
        return value[:120] if type_(value) is str_type else "?"

    def sign(payloads):
        # Called only inside a tick, where no collection runs and no foreign
        # signal handler can (see the loop at the end).
        if get_ident() != main_ident:
            abort("an event signed from another thread")
            return None
        messages = [payload.encode("ascii") for payload in payloads]
        digests = tuple_type(sha256(data).digest() for data in messages)
        # The vault reads its caller's frame: the audit hook lets that one
        # frame read through while the guardian runs.
        permit[0] = True
        try:
            macs = vault_send(digests)
        finally:
            permit[0] = False
        if length(macs) != length(messages):
            abort("the signing key is spoiled")
            return None
        return [data + b"\t" + mac.hex().encode("ascii") + b"\n" for data, mac in zip_(messages, macs)]

    def quiet_signals():
        # Foreign signal handlers are set to "ignore" for the tick (a pending
        # one is then skipped), so that none runs inside the guardian. The
        # common case, in C: every handler is the one found at start.
        restore = []
        if not all_(map_(is_, map_(getsignal, signal_numbers), signal_originals)):
            for signum in signal_numbers:
                current = getsignal(signum)
                if current is not handlers[signum]:
                    restore.append((signum, current))
                    setsignal(signum, sig_ign)
        return restore

    def emit(payload, hold):
        # Lines of a running test are held and signed and written with its end,
        # together; everything else goes out at once.
        if aborted:
            return
        pending.append(payload)
        if hold:
            return
        lines = sign(pending)
        pending.clear()
        if lines is None:
            return
        data = b"".join(lines)
        done = 0
        try:
            while done < length(data):
                done += write(fd, data[done:])
        except exception_type:
            abort("the outcome channel is closed")

    def changed_later(later, name, value):
        if name == "__warningregistry__":
            # Where warnings record what they already showed.
            return type_(value) is dict_type
        kind = later.get(name) if type_(name) is str_type else None
        if kind == "any":
            return True
        if kind == "flag":
            return type_(value) is bool_type
        if kind == "legacy":
            if type_(value) is property_type:
                value = value.fget
            return type_(value) is function_type and value.__code__ in legacy_codes
        return False

    def identity(scope):
        entries, getters, tables, values, sized, sizes, plain, plain_bytes = scopes[scope]
        try:
            # The common case, in C: same lengths and layouts, and every value
            # the same object.
            if (
                all_(map_(eq, map_(length, sized), sizes))
                and all_(map_(eq, map_(getsizeof, plain), plain_bytes))
                and all_(map_(is_, chain(map_(call_getter, getters, tables)), values))
            ):
                return True
        except exception_type:
            pass
        return identity_slowly(entries)

    def identity_slowly(entries):
        nonlocal baseline
        changed = False
        for label_, table, keys, values, size, every, later, originals_ in entries:
            if not str_keyed(table):
                return abort("pytest machinery changed: " + label_ + " holds a key that is not a string")
            # Most tables are untouched: find the changed ones in C first.
            if length(table) == size and all_(map_(is_, map_(table.get, keys), values)):
                continue
            if length(table) != size:
                for name in list_(table):
                    if name not in every and not changed_later(later, name, table[name]):
                        return abort("pytest machinery changed: " + label_ + " gained " + label(name))
                changed = True
            for i in range_(length(keys)):
                value = table.get(keys[i])
                if value is not values[i]:
                    # pytest's own later change, or its undoing at the end.
                    if value is not originals_[i] and not changed_later(later, keys[i], value):
                        return abort("pytest machinery changed: " + label_ + "." + keys[i])
                    changed = True
        if changed:
            # Changes pytest makes itself (checked above) become the baseline.
            fresh = []
            for label_, table, keys, values, size, every, later, originals in baseline:
                fresh.append(
                    (
                        label_,
                        table,
                        keys,
                        tuple_type(table.get(k) for k in keys),
                        length(table),
                        every.union(list_(table)),
                        later,
                        originals,
                    )
                )
            baseline = tuple_type(fresh)
            rebuild()
        return True

    def genuine(kind):
        # A class of pytest's own. Membership hashes the class, and a class
        # hashes through its metaclass: only classes with a plain metaclass
        # are looked up, so no metaclass of the run's making is called.
        meta = type_(kind)
        if meta is not type_ and meta is not abc_meta:
            # pytest's own metaclasses (NodeMeta) are classes with a plain one.
            if type_(meta) is not type_ or meta not in genuine_classes:
                return False
        return kind in genuine_classes

    def str_keyed(table):
        # Every key an exact str: only then can a lookup not run the code of a
        # key (its __eq__) in the middle of a check. Iterating keys runs none.
        return all_(map_(is_, map_(type_, table), repeat(str_type)))

    def fields(obj):
        # An instance's or module's attributes, as long as they are a plain
        # table of string keys; anything else ends the run.
        table = obj.__dict__
        if type_(table) is dict_type and str_keyed(table):
            return table
        abort("an attribute table keyed by something other than strings")
        return {}

    def known_plugin(name, plugin):
        # A module of pytest's own, an object or class of pytest's own, the
        # grader's plugin, or a pristine conftest module of the repository.
        if type_(name) is not str_type:
            return False
        kind = type_(plugin)
        if kind is module_type:
            if plugin in genuine_modules:
                return True
            path = fields(plugin).get("__file__")
            if type_(path) is str_type and path in conftests:
                with open_(path, "rb") as handle:
                    return sha256(handle.read()).hexdigest() == conftests[path]
            return False
        if kind is type_:
            return plugin in genuine_classes
        return kind is our_plugin_class or genuine(kind)

    def holds(table, value):
        for found in list_(table.values()):
            if found is value:
                return True
        return False

    def impl_ok(impl):
        if type_(impl) is not hook_impl_class:
            return False
        plugin = impl.plugin
        function = impl.function
        name = impl.plugin_name
        if type_(name) is not str_type or plugins.get(name) is not plugin:
            return False
        kind = type_(plugin)
        if kind is module_type:
            return holds(plugin.__dict__, function)
        if kind is type_:
            for found in list_(plugin.__dict__.values()):
                if found is function:
                    return True
                if type_(found) is staticmethod_type and found.__func__ is function:
                    return True
                if (
                    type_(found) is classmethod_type
                    and type_(function) is method_type
                    and function.__func__ is found.__func__
                ):
                    return True
            return False
        if type_(function) is not method_type or function.__self__ is not plugin:
            return False
        return holds(kind.__dict__, function.__func__)

    def task_decides(hook_name, impl):
        # A module of the task (a conftest) may give fixtures and configure,
        # never decide how a test runs or what its report says.
        return hook_name in runtest_hooks and type_(impl.plugin) is module_type and impl.plugin not in genuine_modules

    def hooks_ok(names):
        # The hook callers and their implementations are those known; a new
        # implementation must belong to a known plugin.
        table = fields(relay)
        for hook_name in names:
            caller = table.get(hook_name)
            known = hook_impls.get(hook_name)
            if known is None:
                if caller is None:
                    continue
                return abort("a hook caller appeared: " + hook_name)
            if caller is not known[0]:
                return abort("a hook caller replaced: " + hook_name)
            impls = caller._hookimpls
            if type_(impls) is not list_type or caller._hookexec is not known[3]:
                return abort("hook dispatch replaced: " + hook_name)
            if (
                length(impls) == length(known[1])
                and all_(map_(is_, impls, known[1]))
                and all_(map_(is_, (i.function for i in impls), known[2]))
            ):
                continue
            for impl in impls:
                if not impl_ok(impl):
                    return abort("a hook implementation added: " + hook_name)
                if task_decides(hook_name, impl):
                    return abort("a conftest of the task implements " + hook_name + ", which decides outcomes")
            hook_impls[hook_name] = (caller, tuple_type(impls), tuple_type(i.function for i in impls), known[3])
        return True

    def plugins_ok():
        manager = fields(pm)
        if fields(config).get("pluginmanager") is not pm or manager.get("hook") is not relay:
            return abort("the plugin manager was replaced")
        current = manager.get("_name2plugin")
        if type_(current) is not dict_type:
            return abort("the plugin registry was replaced")
        for name, plugin in list_(current.items()):
            if plugin is None or (type_(name) is str_type and plugins.get(name) is plugin):
                continue
            if type_(name) is str_type and name not in plugins and known_plugin(name, plugin):
                plugins[name] = plugin
                continue
            return abort("a plugin registered: " + label(name))
        if manager.get("_inner_hookexec") is not inner_hookexec:
            return abort("hook dispatch replaced")
        return hooks_ok(hot_hooks)

    def tests_ok(only):
        # The test modules' functions and classes, and every test item (or the
        # running one).
        for table, keys, values in test_tables:
            if not str_keyed(table):
                return abort("a test module's globals keyed by something other than strings")
            if not all_(map_(is_, map_(table.get, keys), values)):
                for i in range_(length(keys)):
                    if table.get(keys[i]) is not values[i]:
                        return abort("a test module changed: " + keys[i][:60])
        for item, obj, code in test_objects if only is None else (test_objects[only],):
            if type_(item) is not function_class:
                return abort("a test item changed")
            d = fields(item)
            if d.get("_obj") is not obj or "runtest" in d:
                return abort("a test item changed: " + label(item._nodeid))
            if obj.__code__ is not code:
                return abort("a test function changed: " + label(item._nodeid))
        return True

    nested_codes = {}

    def from_its_module(path, module, obj):
        # The module pytest's loader executed the test file into, the test
        # function made by that execution: its globals are that module's and
        # its code is part of the file's code.
        genuine = test_modules.get(path)
        if genuine is None or genuine[0] is not module or obj.__globals__ is not fields(module):
            return False
        codes = nested_codes.get(path)
        if codes is None:
            codes = []
            stack = [genuine[1]]
            while stack:
                code = stack.pop()
                codes.append(code)
                for const in code.co_consts:
                    if type_(const) is code_type:
                        stack.append(const)
            nested_codes[path] = codes
        target = obj.__code__
        for code in codes:
            if code is target:
                return True
        return False

    def module_of(item):
        # The test module object, by walking the parents pytest made.
        node = item.parent
        for _ in range_(16):
            kind = type_(node)
            if kind is module_node_class:
                return fields(node).get("_obj")
            if not genuine(kind):
                return None
            node = node.parent
        return None

    def error_kind(report):
        longrepr = fields(report).get("longrepr")
        if not genuine(type_(longrepr)):
            return "error"
        crash = fields(longrepr).get("reprcrash")
        if not genuine(type_(crash)):
            return "error"
        text = fields(crash).get("message")
        if type_(text) is not str_type:
            return "error"
        # Only the name of a builtin or pytest exception: any other word would
        # be a channel out of the run (a class named after the hidden tests).
        word = text.split(":", 1)[0].strip().split(" ")[-1].split(".")[-1]
        return word if word in error_names else "error"

    inner_hookexec = None

    def handle(tick):
        nonlocal state, config, pm, relay, items, index, next_phase, observed
        nonlocal test_tables, test_objects, inner_hookexec
        auditor_send(None)
        if type_(tick) is not str_type:
            return abort("a tick of the wrong type")
        # The frame that ticked: below handle() and the guardian's own frame.
        permit[0] = True
        try:
            frame = getframe(2)
        finally:
            permit[0] = False
        if tick == "start" or tick == "compile_error" or tick == "finish":
            if frame.f_code not in boot_codes:
                return abort("a boot event from elsewhere: " + tick)
            local = frame.f_locals
            if tick == "start":
                if state != "boot":
                    return abort("started twice")
                rebuild()
                emit('{"e":"start","v":1,"py":' + encode(local["python_version"]) + "}", False)
            elif tick == "compile_error":
                path, line, kind = local["compile_error"]
                emit(
                    '{"e":"compile_error","path":%s,"line":%d,"kind":%s}' % (encode(path), line, encode(kind)),
                    False,
                )
            else:
                status = local.get("status")
                if type_(status) is not int_type:
                    return abort("an exit status of the wrong type")
                if config is not None and not (identity("all") and plugins_ok() and tests_ok(None)):
                    return
                emit('{"e":"finish","status":%d}' % status, False)
                state = "finished"
            return
        # Everything else comes from the plugin's hooks, called through pluggy
        # by the pytest function that calls that hook.
        if frame.f_code not in our_codes:
            return abort("a tick not from the grader's plugin: " + label(tick))
        below = frame.f_back
        while below is not None and below.f_code in pluggy_codes:
            below = below.f_back
        want = callers.get(tick)
        if want is None or below is None or below.f_code not in want:
            return abort("hook " + label(tick) + " not called by pytest")
        args = frame.f_locals
        if tick == "sessionstart":
            session = args.get("session")
            if state != "boot" or type_(session) is not session_class:
                return abort("a second or foreign session")
            # Node attributes such as config, parent and _nodeid are slots:
            # reading them looks in no table.
            config = session.config
            if type_(config) is not config_class or not identity("all"):
                return abort("a foreign config")
            pm = fields(config).get("pluginmanager")
            if type_(pm) is not plugin_manager_class:
                return abort("a foreign plugin manager")
            manager = fields(pm)
            registered = manager.get("_name2plugin")
            relay = manager.get("hook")
            inner_hookexec = manager.get("_inner_hookexec")
            if type_(registered) is not dict_type or type_(relay) is not hook_relay_class:
                return abort("a foreign plugin registry")
            for name, plugin in list_(registered.items()):
                if plugin is None:
                    continue
                if not known_plugin(name, plugin):
                    return abort("a plugin registered before the session: " + label(name))
                plugins[name] = plugin
            relay_table = fields(relay)
            for hook_name in hot_hooks:
                caller = relay_table.get(hook_name)
                if caller is None:
                    continue
                kind = type_(caller)
                if type_(kind) is not type_ or kind not in hook_caller_classes:
                    return abort("a foreign hook caller: " + hook_name)
                impls = caller._hookimpls
                if type_(impls) is not list_type:
                    return abort("a foreign hook implementation list: " + hook_name)
                for impl in impls:
                    if not impl_ok(impl):
                        return abort("a foreign hook implementation: " + hook_name)
                    if task_decides(hook_name, impl):
                        return abort("a conftest of the task implements " + hook_name + ", which decides outcomes")
                hook_impls[hook_name] = (
                    caller,
                    tuple_type(impls),
                    tuple_type(i.function for i in impls),
                    caller._hookexec,
                )
            state = "session"
            return
        if state == "boot" or state == "finished":
            return abort("a hook outside the session: " + label(tick))
        if tick == "collectreport":
            report = args.get("report")
            if type_(report) is not collect_report_class:
                return abort("a foreign collect report")
            d = fields(report)
            outcome = d.get("outcome")
            if type_(outcome) is not str_type:
                return abort("a collect report of the wrong type")
            if outcome != "failed":
                return
            nodeid = d.get("nodeid")
            if type_(nodeid) is not str_type:
                return abort("a collect report of the wrong type")
            if not identity("report") or not plugins_ok():
                return
            emit('{"e":"collect_error","id":%s,"kind":%s}' % (encode(nodeid), encode(error_kind(report))), False)
            return
        if tick == "collection_finish":
            session = args.get("session")
            if state != "session" or type_(session) is not session_class:
                return abort("collection finished twice")
            if not identity("all") or not plugins_ok():
                return
            found = fields(session).get("items")
            if type_(found) is not list_type:
                return abort("collected items of the wrong type")
            ids = []
            objects = []
            modules = {}
            for item in found:
                if type_(item) is not function_class or "runtest" in fields(item):
                    return abort("a collected item that is not a pytest function")
                nodeid = item._nodeid
                if type_(nodeid) is not str_type:
                    return abort("a node id of the wrong type")
                ids.append(encode(nodeid))
                if collect_mode:
                    continue
                obj = fields(item).get("_obj")
                original = fields(item).get("originalname")
                module = module_of(item)
                path = fields(module).get("__file__") if type_(module) is module_type else None
                if (
                    type_(obj) is not function_type
                    or type_(path) is not str_type
                    or type_(original) is not str_type
                    or path not in test_files
                    or obj.__code__.co_filename != path
                    or obj.__code__.co_name != original
                ):
                    return abort("a test function not from its file: " + label(nodeid))
                if not from_its_module(path, module, obj):
                    return abort("a test function not from the module pytest imported: " + label(nodeid))
                objects.append((item, obj, obj.__code__))
                modules[path] = module
            items = tuple_type(found)
            test_objects = tuple_type(objects)
            tables = []
            for module in modules.values():
                table = fields(module)
                keys = tuple_type(
                    k
                    for k, v in list_(table.items())
                    if type_(k) is str_type
                    and (type_(v) is function_type or type_(v) is module_type or type_(v) is type_)
                )
                tables.append((table, keys, tuple_type(table[k] for k in keys)))
            test_tables = tuple_type(tables)
            emit('{"e":"collected","ids":[' + ",".join(ids) + "]}", False)
            state = "collected"
            return
        if state != "collected" and state != "in_test":
            return abort("a test hook out of place: " + label(tick))
        if tick == "logstart":
            if state != "collected" or index + 1 >= length(items):
                return abort("a test started out of order")
            index += 1
            item = items[index]
            nodeid = item._nodeid
            if below.f_locals.get("item") is not item or args.get("nodeid") is not nodeid:
                return abort("a test started out of order")
            if type_(nodeid) is not str_type:
                return abort("a node id of the wrong type")
            emit('{"e":"begin","id":' + encode(nodeid) + "}", False)
            state = "in_test"
            next_phase = 0
            observed = {}
            return
        if state != "in_test":
            return abort("a phase outside a test")
        item = items[index]
        nodeid = item._nodeid
        if type_(nodeid) is not str_type:
            return abort("a node id of the wrong type")
        if tick == "before_call" or tick.startswith("after_"):
            when = tick.split("_", 1)[1]
            if next_phase >= 3 or phases[next_phase] != when or args.get("item") is not item:
                return abort("a phase out of order: " + when)
            if tick == "before_call":
                return
            if when in observed:
                return abort("a phase ran twice: " + when)
            if when == "call" and not identity("report"):
                return
            # Whether it raised, never the exception itself: the guardian holds
            # no object of the run whose release could run its code here.
            observed[when] = args.get("raised") is not None
            return
        if tick == "before_pyfunc":
            # The last moment before pytest reads the test function and calls
            # it: what the body runs with (pytest, the builtins, the test's own
            # module and item, the runtest hooks) is checked here, after every
            # hook of the call phase that could run other code.
            if next_phase >= 3 or phases[next_phase] != "call" or "call" in observed or "pyfunc" in observed:
                return abort("a test body out of order")
            if args.get("pyfuncitem") is not item:
                return abort("a test body for another item")
            testargs = args.get("testargs")
            if (
                args.get("testfunction") is not fields(item).get("_obj")
                or type_(testargs) is not dict_type
                or not str_keyed(testargs)
            ):
                return abort("a test body that is not the collected test")
            if not identity("test") or not tests_ok(index) or not plugins_ok():
                return
            observed["pyfunc"] = True
            return
        if tick == "end_pyfunc":
            # The body returned: its module and item are as they were.
            if "pyfunc" not in observed or "pyfunc_done" in observed or args.get("pyfuncitem") is not item:
                return abort("a test body out of order")
            if not tests_ok(index):
                return
            observed["pyfunc_done"] = True
            return
        if tick == "logreport":
            report = args.get("report")
            when = phases[next_phase] if next_phase < 3 else None
            if when is None or type_(report) is not report_class or below.f_locals.get("report") is not report:
                return abort("a logged report that pytest did not make")
            if type_(below.f_locals.get("call")) is not callinfo_class or when not in observed:
                return abort("a report without its phase")
            d = fields(report)
            rwhen = d.get("when")
            rid = d.get("nodeid")
            outcome = d.get("outcome")
            if type_(rwhen) is not str_type or type_(rid) is not str_type or type_(outcome) is not str_type:
                return abort("a report of the wrong type")
            if rwhen != when or rid != nodeid or outcome not in ("passed", "failed", "skipped"):
                return abort("a report for another phase")
            if outcome == "passed" and observed[when]:
                return abort("a failing " + when + " reported as passed")
            if when == "call" and outcome == "passed" and "pyfunc_done" not in observed:
                return abort("a call reported as passed that never ran the test function")
            xfail = 1 if "wasxfail" in d else 0
            emit(
                '{"e":"phase","id":%s,"when":"%s","outcome":"%s","xfail":%d}' % (encode(nodeid), when, outcome, xfail),
                True,
            )
            next_phase += 1
            if when == "setup" and outcome != "passed":
                next_phase = 2
            return
        if tick == "logfinish":
            if next_phase != 3:
                return abort("a test ended before its teardown")
            emit('{"e":"end","id":' + encode(nodeid) + "}", False)
            state = "collected"
            return
        return abort("an unknown tick " + label(tick))

    reply = None
    while True:
        tick = yield reply
        reply = None
        if aborted:
            continue
        # No code of the run may execute inside a tick: the collector (whose
        # finalizers and callbacks run wherever it starts) is off, and foreign
        # signal handlers are set aside, until the tick is over. The audit
        # hook refuses any frame reached while the guardian runs.
        was_enabled = gc_isenabled()
        gc_disable()
        restore = ()
        try:
            restore = quiet_signals()
            handle(tick)
        except exception_type as exc:
            abort("the grader's checks failed on " + label(tick) + ": " + type_(exc).__name__)
        finally:
            for signum, current in restore:
                setsignal(signum, current)
            if was_enabled:
                gc_enable()


def _main():
    config = _read_config()
    fd = int(config["fd"])
    os.set_inheritable(fd, False)
    root = config["root"]
    collect_mode = config["mode"] == "collect"
    compile_list = list(config.get("compile") or [])
    pytest_args = list(config["args"])
    select = frozenset(config.get("select") or [])
    test_files = frozenset(os.path.join(root, p) for p in config.get("test_files") or [])
    conftests = {os.path.join(root, p): d for p, d in (config.get("conftests") or {}).items()}
    hidden = [p for p in (config.get("hidden") or []) if p.endswith(".py")]
    key = bytes.fromhex(config["key"])
    python_version = "%d.%d.%d" % sys.version_info[:3]
    _not_dumpable()
    _import_machinery()

    import _json
    import abc
    import builtins
    import _signal
    import gc
    import io
    import itertools
    import operator
    import threading
    import types

    import importlib._bootstrap
    import importlib._bootstrap_external

    import _pytest.assertion.rewrite
    import _pytest.config
    import _pytest.main
    import _pytest.python
    import _pytest.reports
    import _pytest.runner
    import pluggy._hooks
    import pytest

    sha256 = _sha256_constructor()

    baseline, genuine_classes = _baseline()
    genuine_modules = frozenset(
        m for n, m in sys.modules.items() if m is not None and (n == "pytest" or n.startswith(("_pytest", "pluggy")))
    )
    pluggy_codes = set()
    for name, module in list(sys.modules.items()):
        if module is not None and name.startswith("pluggy"):
            pluggy_codes |= _module_codes(module)
    runner = _pytest.runner
    session_codes = set()
    _codes_of(_pytest.main.Session, session_codes)
    runner_codes = _module_codes(runner)
    call_and_report = runner.call_and_report.__code__
    hook_lambdas = frozenset(c for c in call_and_report.co_consts if isinstance(c, types.CodeType))
    protocol = frozenset((runner.pytest_runtest_protocol.__code__,))
    callers = {
        "sessionstart": frozenset((_pytest.main.wrap_session.__code__,)),
        "collectreport": frozenset(session_codes | runner_codes),
        "collection_finish": frozenset(session_codes),
        "logstart": protocol,
        "logfinish": protocol,
        "logreport": frozenset((call_and_report,)),
        "before_call": hook_lambdas,
        "before_pyfunc": frozenset((_pytest.python.Function.runtest.__code__,)),
        "end_pyfunc": frozenset((_pytest.python.Function.runtest.__code__,)),
        "after_setup": hook_lambdas,
        "after_call": hook_lambdas,
        "after_teardown": hook_lambdas,
    }

    import warnings

    getattr_ = getattr
    hasattr_ = hasattr
    type_ = type
    code_type = types.CodeType
    # CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR
    async_flags = 0x80 | 0x100 | 0x200
    async_warn_and_skip = _pytest.python.async_warn_and_skip
    warn = warnings.warn
    return_not_none = pytest.PytestReturnNotNoneWarning

    class Plugin:
        """The grader's pytest plugin. Its hooks only tick the guardian, which
        reads what it needs from their frames."""

        def __init__(self, tick):
            self._tick = tick

        @pytest.hookimpl(trylast=True)
        def pytest_sessionstart(self, session):
            self._tick("sessionstart")

        @pytest.hookimpl(tryfirst=True)
        def pytest_collectreport(self, report):
            self._tick("collectreport")

        @pytest.hookimpl(trylast=True)
        def pytest_collection_modifyitems(self, session, config, items):
            if collect_mode:
                return
            drop = [i for i in items if i.nodeid not in select]
            if drop:
                config.hook.pytest_deselected(items=drop)
                items[:] = [i for i in items if i.nodeid in select]

        @pytest.hookimpl(tryfirst=True)
        def pytest_collection_finish(self, session):
            self._tick("collection_finish")

        @pytest.hookimpl(tryfirst=True)
        def pytest_runtest_logstart(self, nodeid, location):
            self._tick("logstart")

        @pytest.hookimpl(wrapper=True, tryfirst=True)
        def pytest_runtest_setup(self, item):
            raised = None
            try:
                return (yield)
            except BaseException as exc:
                raised = exc
                raise
            finally:
                self._tick("after_setup")

        @pytest.hookimpl(wrapper=True, tryfirst=True)
        def pytest_runtest_call(self, item):
            self._tick("before_call")
            raised = None
            try:
                return (yield)
            except BaseException as exc:
                raised = exc
                raise
            finally:
                self._tick("after_call")

        @pytest.hookimpl(wrapper=True, tryfirst=True)
        def pytest_runtest_teardown(self, item, nextitem):
            raised = None
            try:
                return (yield)
            except BaseException as exc:
                raised = exc
                raise
            finally:
                self._tick("after_teardown")

        @pytest.hookimpl(tryfirst=True)
        def pytest_pyfunc_call(self, pyfuncitem):
            # pytest's own call, with the guardian's checks right before the
            # body and right after it: no other code (pytest's helpers, the
            # standard library) runs between a check and the test.
            testfunction = pyfuncitem.obj
            code = getattr_(testfunction, "__code__", None)
            if type_(code) is not code_type or code.co_flags & async_flags:
                # pytest's implementation skips coroutines with its warning.
                return None
            funcargs = pyfuncitem.funcargs
            testargs = {arg: funcargs[arg] for arg in pyfuncitem._fixtureinfo.argnames}
            self._tick("before_pyfunc")
            result = testfunction(**testargs)
            self._tick("end_pyfunc")
            if hasattr_(result, "__await__") or hasattr_(result, "__aiter__"):
                async_warn_and_skip(pyfuncitem.nodeid)
            elif result is not None:
                warn(
                    return_not_none(
                        "Expected None, but %s returned %r, which will be an error in a future version of"
                        " pytest.  Did you mean to use `assert` instead of `return`?" % (pyfuncitem.nodeid, result)
                    )
                )
            return True

        @pytest.hookimpl(tryfirst=True)
        def pytest_runtest_logreport(self, report):
            self._tick("logreport")

        @pytest.hookimpl(trylast=True)
        def pytest_runtest_logfinish(self, nodeid, location):
            self._tick("logfinish")

    our_codes = set()
    _codes_of(Plugin, our_codes)

    # Set by the guardian around its own frame reads (and the vault's): any
    # other frame reached while the guardian runs is code of the run inside it.
    permit = [False]
    foreign_event = "pdl-swe: frame reached inside the grader"
    exec_event = "pdl-swe: a test file executed"
    # Test file path -> (the module pytest's loader executed it into, its code).
    test_modules = {}
    vault = _vault()
    next(vault)
    guardian = _guardian()
    next(guardian)
    auditor = _auditor()
    next(auditor)
    auditor.send(
        (
            fd,
            os.write,
            (vault, guardian, auditor),
            test_files | frozenset(conftests),
            type,
            str,
            tuple,
            _json.encode_basestring_ascii,
            Exception,
            frozenset(_REFUSED_EVENTS),
            _FRAME_ATTRIBUTES,
            len,
            bytes,
            foreign_event,
            tuple(
                sorted(
                    {
                        os.path.join(os.path.normpath(d), "")
                        for d in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
                    }
                )
            ),
            exec_event,
            (
                _pytest.assertion.rewrite.AssertionRewritingHook.exec_module.__code__,
                importlib._bootstrap._call_with_frames_removed.__code__,
                importlib._bootstrap_external._LoaderBasics.exec_module.__code__,
            ),
            test_modules,
            types.ModuleType,
            types.CodeType,
            io.open,
            compile,
            ("_test", "_xxtest", "_xxsubinterpreters", "_xxinterpchannels"),
            zip,
        )
    )
    guardian.send(
        (
            vault.send,
            auditor.send,
            fd,
            os.write,
            sha256,
            sys._getframe,
            _json.encode_basestring_ascii,
            baseline,
            genuine_classes,
            genuine_modules,
            frozenset(pluggy_codes),
            frozenset((_main.__code__,)),
            frozenset(our_codes),
            callers,
            (
                _pytest.reports.TestReport,
                _pytest.python.Function,
                _pytest.main.Session,
                _pytest.config.Config,
                runner.CallInfo,
                _pytest.python.Module,
                _pytest.reports.CollectReport,
                _pytest.config.PytestPluginManager,
                pluggy._hooks.HookRelay,
                frozenset((pluggy._hooks.HookCaller, pluggy._hooks._SubsetHookCaller)),
                pluggy._hooks.HookImpl,
                Plugin,
            ),
            conftests,
            test_files,
            collect_mode,
            (
                type,
                str,
                int,
                bool,
                list,
                tuple,
                dict,
                types.ModuleType,
                types.FunctionType,
                types.MethodType,
                property,
                staticmethod,
                classmethod,
                Exception,
                len,
                range,
                list,
                all,
                map,
                operator.is_,
                operator.eq,
                zip,
                frozenset(
                    [n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)]
                    + ["Failed", "Skipped", "XFailed", "Exit", "CollectError", "UsageError", "OutcomeException"]
                ),
                abc.ABCMeta,
                itertools.repeat,
                sys.getsizeof,
                operator.itemgetter,
                operator.itemgetter.__call__,
                itertools.chain.from_iterable,
                io.open,
                gc.disable,
                gc.enable,
                gc.isenabled,
                _signal.getsignal,
                _signal.signal,
                _signal.valid_signals,
                _signal.SIG_IGN,
                threading.main_thread().ident,
                threading.get_ident,
                frozenset(_module_codes(sys.modules["_pytest.legacypath"])),
                permit,
                test_modules,
                types.CodeType,
            ),
        )
    )
    # The vault answers the guardian's own signing path and nothing else.
    nested = {c.co_name: c for c in _guardian.__code__.co_consts if isinstance(c, types.CodeType)}
    vault.send(
        (
            key,
            guardian.gi_frame,
            (nested["sign"], nested["emit"], nested["handle"]),
            sys._getframe,
            sha256,
            type,
            bytes,
            tuple,
            len,
        )
    )

    hidden_check = None
    if hidden:
        hidden_targets, hidden_tails = _hidden_paths(root, hidden, os.path.realpath, os.path.join)
        hidden_modules = frozenset(
            [os.path.join(root, p) for p in hidden] + [os.path.realpath(os.path.join(root, p)) for p in hidden]
        )
        hidden_check = _hidden_guard(
            root,
            hidden_modules,
            hidden_targets,
            hidden_tails,
            os.path.realpath,
            os.path.normpath,
            os.path.join,
            os.getcwd,
            sys._getframe,
            type,
            str,
            bytes,
            (OSError, ValueError),
        )
        # Formatting a stack (inspect.stack(), traceback.print_stack(), a
        # log record's stack_info) while a hidden test is on it reads the
        # test's source through linecache: it finds none, so honest code
        # never opens a hidden module. Records carry no source lines.
        import linecache

        for path in hidden_modules:
            linecache.cache[path] = (0, None, [], path)

    def audit(
        event,
        args,
        _send=auditor.send,
        _watched=_WATCHED_EVENTS,
        _frames=_FRAME_ATTRIBUTES,
        _type=type,
        _str=str,
        _len=len,
        _busy=ValueError,
        _refusal=RuntimeError,
        _guardian=guardian,
        _auditor=auditor,
        _permit=permit,
        _foreign=(foreign_event, ()),
        _exec=exec_event,
        _code=types.CodeType,
        _tests=test_files,
        _getframe=sys._getframe,
        _hidden=hidden_check,
        _hidden_read=(_HIDDEN_READ, ()),
    ):
        # Every name used here is bound at definition: a builtin rebound later
        # never runs in the hook.
        # While the guardian runs, only its own frame reads (and the vault's)
        # are expected; a frame reached by anything else is code of the run
        # that got to execute inside it (a finalizer, a callback), and could
        # reach the guardian's state through ``f_back``. The auditor reads no
        # frame, so one reached while it runs is foreign too.
        if event == "sys._getframe" or (
            event == "object.__getattr__"
            and _len(args) > 1
            and _type(args[1]) is _str
            and (args[1] == "tb_frame" or args[1] in _frames)
        ):
            if _auditor.gi_running:
                raise _refusal("refused by the grader: a frame reached inside the grader")
            if _guardian.gi_running and not _permit[0]:
                _send(_foreign)
                raise _refusal("refused by the grader: a frame reached inside the grader")
        if event == "exec":
            # The code of a test file about to run: the auditor records into
            # which module (the frame that executes it tells).
            code = args[0] if _len(args) > 0 else None
            if _type(code) is _code and _type(code.co_filename) is _str and code.co_filename in _tests:
                reason = _send((_exec, (code, _getframe(1))))
                if reason is not None:
                    raise _refusal("refused by the grader: " + reason)
            return
        if (
            _hidden is not None
            and (event == "open" or event == "os.listdir" or event == "os.scandir")
            and _len(args) > 0
            and not _auditor.gi_running
            and _hidden(args[0])
        ):
            try:
                _send(_hidden_read)
            except _busy:
                pass
            raise _refusal("refused by the grader: " + _hidden_read[0])
        # Most events are none of the auditor's business (pytest's and the
        # guardian's own frame and code reads above all): leave them here, in
        # as few steps as possible. ``event`` is always an exact str built by
        # the interpreter; a non-str attribute name goes to the auditor.
        if event not in _watched:
            return
        if event == "object.__getattr__" and _len(args) > 1:
            name = args[1]
            if _type(name) is _str and name not in _frames:
                return
        try:
            reason = _send((event, args))
        except _busy:
            # The auditor is running (an event fired inside it): nothing to add.
            return
        if reason is not None:
            raise _refusal("refused by the grader: " + reason)

    sys.addaudithook(audit)
    tick = guardian.send
    # Nothing the code under test could use stays in this frame, which is on the
    # stack for the whole run.
    del key, config, vault, guardian, auditor, audit, conftests, hidden_check, callers, baseline, genuine_classes
    del pluggy_codes, our_codes, session_codes, runner_codes, genuine_modules, nested

    tick("start")
    compile_error = None
    for rel in compile_list:
        path = os.path.join(root, rel)
        try:
            with open(path, "rb") as handle:
                source = handle.read()
            compile(source, rel, "exec", dont_inherit=True)
        except SyntaxError as exc:
            compile_error = (rel, int(exc.lineno or 0), type(exc).__name__)
            tick("compile_error")
        except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
            compile_error = (rel, 0, type(exc).__name__)
            tick("compile_error")
        except OSError:
            pass
    compile_error = None
    sys.path[0] = root
    os.chdir(root)
    status = 3
    try:
        status = int(pytest.main(pytest_args, plugins=[Plugin(tick)]))
    finally:
        try:
            tick("finish")
        except BaseException:
            pass
        for stream in (sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(status)


if __name__ == "__main__":
    _main()
