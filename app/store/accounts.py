"""The accounts' ``Store`` methods on SQL (a part of ``SQLStore``): an account's row, and
the audit entry of an operator's change to it, written in one transaction."""

from __future__ import annotations

from app.store import audit as audit_log
from app.store import statements as sql
from app.store.audit import AuditRecord, write_audit
from app.store.core import SQLCore
from app.store.program import Program, execute, row
from app.store.records import AccountQuery, AccountRecord, to_record, to_row


class AccountsSQL(SQLCore):
    """``Store``'s account methods; what each promises is in ``Store``'s docstrings."""

    async def create_account(self, rec: AccountRecord, audit: AuditRecord | None = None) -> bool:
        def create() -> Program[bool]:
            # ON CONFLICT (external_id) DO NOTHING: a taken id writes no row, so no entry
            if (yield from execute(sql.INSERT_ACCOUNT, to_row(rec))) != 1:
                return False
            yield from write_audit(audit)
            return True

        return await self._write(create())

    async def delete_new_account(self, pid: str) -> bool:
        def delete() -> Program[bool]:
            if (yield from execute(sql.DELETE_NEW_ACCOUNT, (pid, pid, pid))) != 1:
                return False
            yield from execute(audit_log.DELETE_AUDIT_OF_ACCOUNT, (pid,))
            return True

        return await self._write(delete())

    async def get_account(self, pid: str) -> AccountRecord | None:
        return await self._record(AccountRecord, sql.GET_ACCOUNT, (pid,))

    async def list_accounts(self) -> list[AccountRecord]:
        return await self._records(AccountRecord, sql.LIST_ACCOUNTS)

    async def set_low_balance(self, pid: str, low: int | None) -> None:
        await self._write(execute(sql.SET_LOW_BALANCE, (low, pid)))

    async def list_accounts_page(self, query: AccountQuery) -> list[AccountRecord]:
        return await self._records(AccountRecord, *sql.account_page(query))

    async def set_account_status(
        self, pid: str, status: str, audit: AuditRecord | None = None
    ) -> AccountRecord | None:
        return await self._write(self._set_account(sql.SET_ACCOUNT_STATUS, status, pid, audit))

    async def set_external_id(
        self, pid: str, external_id: str | None, audit: AuditRecord | None = None
    ) -> AccountRecord | None:
        return await self._write(self._set_account(sql.SET_EXTERNAL_ID, external_id, pid, audit))

    def _set_account(
        self, update: str, value: str | None, pid: str, audit: AuditRecord | None
    ) -> Program[AccountRecord | None]:
        if (yield from execute(update, (value, pid))) != 1:
            return None  # no such account: nothing changed, nothing audited
        yield from write_audit(audit)
        found = yield from row(sql.GET_ACCOUNT, (pid,))
        return None if found is None else to_record(AccountRecord, found)

    async def find_external_id(self, external_id: str) -> AccountRecord | None:
        return await self._record(AccountRecord, sql.GET_ACCOUNT_BY_EXTERNAL_ID, (external_id,))
