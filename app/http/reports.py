"""The answers of the usage and activity reports: JSON, or a CSV file streamed as it is
written (``format=csv``)."""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable, Mapping
from typing import Any

from litestar import Response
from litestar.response import Stream

from app.runtime import Services
from app.usage.activity import parse_filter
from app.usage.export import CSV_MEDIA_TYPE, activity_csv, parse_format
from app.usage.receipts import OperatorReceipt, Receipt, Receipts


def csv_download(lines: Iterable[str] | AsyncIterable[str], filename: str) -> Stream:
    """``lines`` (CSV text, a line at a time) as a ``text/csv`` attachment named
    ``filename``: sent as each line is made, never held whole."""
    return Stream(
        lines,
        media_type=CSV_MEDIA_TYPE,
        headers={"content-disposition": f'attachment; filename="{filename}"'},
    )


async def activity_answer(
    services: Services, pid: str, environment: str, params: Mapping[str, str]
) -> Response[Any]:
    """``GET …/activity``: a page of ``pid``'s activity in ``environment``, or (with
    ``format=csv``) every row the filters name. The parameters are checked, and ``after``
    found, before anything is sent: a bad one is a 400, never a cut CSV."""
    csv_wanted = parse_format(params.get("format")) == "csv"
    wanted = parse_filter(params, csv_export=csv_wanted)
    if not csv_wanted:
        return Response(await services.activity.page(pid, environment, wanted))
    query = await services.activity.query(pid, environment, wanted)
    return csv_download(activity_csv(services.activity.rows(query, wanted.limit)), "activity.csv")


async def receipt_answer(
    services: Services, pid: str, activity_id: str, environment: str
) -> Receipt:
    """``GET /v1/activity/{activity_id}``: the receipt of one of ``pid``'s requests in
    ``environment``, durable or still on its way to the store."""
    receipts = Receipts(services.store, services.redis, services.layout)
    return await receipts.find(pid, activity_id, environment)


async def operator_receipt_answer(
    services: Services, pid: str, activity_id: str
) -> OperatorReceipt:
    """``GET /admin/v1/accounts/{pid}/activity/{activity_id}``: the receipt of one of
    ``pid``'s requests, live or test, with its upstream and what it cost."""
    receipts = Receipts(services.store, services.redis, services.layout)
    return await receipts.find_for_operator(pid, activity_id)
