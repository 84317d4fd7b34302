"""The reseller's books: what users paid, what the providers cost, the margin per alias and
provider (``GET /admin/v1/books``), and the overview of every account's balance and spend
(``GET /admin/v1/accounts?sort=…``)."""
