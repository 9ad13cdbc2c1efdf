import itertools

from src.app import App, Request
from src.blueprints import Blueprint


def handler_named(label):
    def handler(request, **params):
        return {"handler": label, "params": params}

    handler.__name__ = label
    return handler


def hit(app, path, method="GET"):
    response = app.handle(Request(method, path))
    assert response.status == 200, (path, response.status)
    return response.body["handler"], response.body["params"]


def test_static_route_in_later_blueprint_beats_parameter():
    """README: "When several routes match a request, the most specific route wins, whatever the order in which routes, blueprints or apps were registered." """
    app = App()
    reports = Blueprint("reports", url_prefix="/reports")
    reports.get("/{id}")(handler_named("show_report"))
    scheduled = Blueprint("scheduled", url_prefix="/reports")
    scheduled.get("/daily")(handler_named("daily_report"))
    app.register_blueprint(reports)
    app.register_blueprint(scheduled)
    assert hit(app, "/reports/daily") == ("daily_report", {})
    assert hit(app, "/reports/r-17") == ("show_report", {"id": "r-17"})


def test_declaration_order_inside_a_blueprint_does_not_matter():
    """Issue: "Expected: routing follows that rule however the routes are spread over blueprints and in whatever order the blueprints and their handlers are registered." """
    app = App()
    files = Blueprint("files", url_prefix="/files")
    files.get("/{*path}")(handler_named("download"))
    files.get("/{name}")(handler_named("describe"))
    files.get("/{name}/versions/{number:int}")(handler_named("version"))
    files.get("/{name}/versions/latest")(handler_named("latest"))
    app.register_blueprint(files)
    assert hit(app, "/files/readme.md") == ("describe", {"name": "readme.md"})
    assert hit(app, "/files/docs/readme.md") == ("download", {"path": "docs/readme.md"})
    assert hit(app, "/files/a.txt/versions/3") == ("version", {"name": "a.txt", "number": 3})
    assert hit(app, "/files/a.txt/versions/latest") == ("latest", {"name": "a.txt"})
    assert hit(app, "/files/a.txt/versions/first") == ("download", {"path": "a.txt/versions/first"})


def test_typed_parameter_in_later_blueprint_beats_plain_parameter():
    """Issue: "`/orders/{number:int}` in our `legacy_orders` blueprint never gets `/orders/1042`; the request goes to `/orders/{ref}` from the `orders` blueprint registered before it." """
    app = App()
    orders = Blueprint("orders", url_prefix="/orders")
    orders.get("/{ref}")(handler_named("by_reference"))
    legacy = Blueprint("legacy_orders", url_prefix="/orders")
    legacy.get("/{number:int}")(handler_named("by_number"))
    app.register_blueprint(orders)
    app.register_blueprint(legacy)
    assert hit(app, "/orders/1042") == ("by_number", {"number": 1042})
    assert hit(app, "/orders/ord-77") == ("by_reference", {"ref": "ord-77"})


def test_same_answers_whatever_the_blueprint_order():
    """Issue: "Expected: routing follows that rule however the routes are spread over blueprints and in whatever order the blueprints and their handlers are registered."

    README: "…and `/teams/core/{section}` beats `/teams/{team}/members` for `/teams/core/members`."
    """
    def blueprints():
        teams = Blueprint("teams", url_prefix="/teams")
        teams.get("/{team}/members")(handler_named("members"))
        teams.get("/{team}/{*rest}")(handler_named("team_pages"))
        core = Blueprint("core", url_prefix="/teams/core")
        core.get("/{section}")(handler_named("core_section"))
        numbered = Blueprint("numbered", url_prefix="/teams")
        numbered.get("/{number:int}/members")(handler_named("numbered_members"))
        numbered.get("/{team}/{page}")(handler_named("team_page"))
        return [teams, core, numbered]

    expected = {
        "/teams/core/members": ("core_section", {"section": "members"}),
        "/teams/ops/members": ("members", {"team": "ops"}),
        "/teams/12/members": ("numbered_members", {"number": 12}),
        "/teams/ops/wiki": ("team_page", {"team": "ops", "page": "wiki"}),
        "/teams/ops/wiki/home": ("team_pages", {"team": "ops", "rest": "wiki/home"}),
    }
    for order in itertools.permutations(range(3)):
        app = App()
        bps = blueprints()
        for index in order:
            app.register_blueprint(bps[index])
        for path, answer in expected.items():
            assert hit(app, path) == answer, (order, path)


def test_typed_parameter_declared_after_plain_one_in_same_blueprint():
    """README: "When several routes match a request, the most specific route wins, whatever the order in which routes, blueprints or apps were registered."

    README: "…so `/reports/daily` beats `/reports/{id:int}`, which beats `/reports/{id}`…"
    """
    app = App()
    invoices = Blueprint("invoices", url_prefix="/invoices")
    invoices.get("/{reference}")(handler_named("by_reference"))
    invoices.get("/{number:int}")(handler_named("by_number"))
    app.register_blueprint(invoices)
    assert hit(app, "/invoices/2024001") == ("by_number", {"number": 2024001})
    assert hit(app, "/invoices/inv-a") == ("by_reference", {"reference": "inv-a"})
