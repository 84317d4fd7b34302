"""``GET /admin/v1/books``: the reseller's books of a range of days (``app.books``), as JSON
or a CSV file (``format=csv``), behind ``SVC_ADMIN_TOKEN`` as the rest of ``/admin/v1``."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Response, get
from litestar.datastructures import ResponseHeader
from litestar.di import Provide

from app.books.report import book_days, books_csv, read_books
from app.books.value import configured_value
from app.core.errors import ErrorKind
from app.http.deps import admin_guard, operator_middleware, provide_services
from app.http.headers import NO_STORE
from app.http.openapi import ADMIN_ERRORS, ADMIN_TOKEN, errors
from app.http.queries import Query, books_query
from app.http.reports import csv_download
from app.runtime import Services
from app.usage.export import parse_format


class BooksController(Controller):
    response_headers = [ResponseHeader(name=NO_STORE[0], value=NO_STORE[1])]
    path = "/admin/v1"
    guards = [admin_guard]
    middleware = [operator_middleware]
    dependencies = {"services": Provide(provide_services)}
    security = ADMIN_TOKEN
    tags = ["admin"]

    @get(
        "/books",
        dependencies={"params": Provide(books_query)},
        responses=errors(*ADMIN_ERRORS, ErrorKind.INVALID_VALUE),
    )
    async def books(self, services: Services, params: Query) -> Response[Any]:
        """Per day and in total: revenue from purchases by store and currency (gross,
        refunded, net, in micro-units), credits sold, earned, granted, returned, taken back,
        spent and expired, upstream cost by alias, provider and model, and the margin per
        alias (docs/operations.md, "The books")."""
        csv_wanted = parse_format(params.get("format")) == "csv"
        days = book_days(params, services.clock())
        value = configured_value(services.settings.credit_value)
        books = await read_books(services.store, days, value)
        if csv_wanted:
            return csv_download(books_csv(books), f"books-{days[0]}-{days[-1]}.csv")
        return Response(books)
