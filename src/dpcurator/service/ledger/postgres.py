"""The ledger's reservation as ONE PostgreSQL statement: a PL/pgSQL function run in autocommit.

:meth:`dpcurator.service.ledger.Ledger.reserve` locks the dataset row (the global cap) for every
query on the dataset. Done from Python, the lock is held across several round trips to the
database, and after each one the request's thread must win its process's GIL back; every other
query on the dataset waits meanwhile. Inside this function the same steps run in the database
(lock the dataset row, then the grant row; check both budgets; update both running totals; insert
the charge) and the locks are held for microseconds: one round trip instead of five (BEGIN, lock,
write, COMMIT and the setting below).

Budgets stay exact: costs are fractions written as text (``"1/1000"``), added and compared here in
``numeric``, PostgreSQL's arbitrary-precision type, on integer numerators and denominators (``a/b
<= c/d`` iff ``a*d <= c*b``; sums reduced by their gcd and written as Python writes a Fraction).
A test compares both functions with Python's :class:`fractions.Fraction` on random fractions.

Budgets with concentrated accounting (:mod:`dpcurator.service.ledger.accounts`) are not checked
by :data:`RESERVE`: under the dataset row's lock it finds their account and returns without
charging (v2; v1 predates accounts). Their filters run in Python, so :data:`REPLAYED` takes the
caller's decision with what it was made on (the budgets, and the numbers of charges its replays
read) and writes the charge only if that is still the state under the locks
(:mod:`dpcurator.service.ledger.replayed`); else the caller reserves in a transaction that replays
the events.

Like the rest of the reservation, its commit does not wait for the WAL flush (see Durability in
:mod:`dpcurator.service.ledger`): the completion's flushed commit makes it durable before any
value is sent.

The functions' names carry a version: a changed definition gets a new name, so servers of two
versions can share one database.
"""

from __future__ import annotations

from sqlalchemy import Engine, text

ADD = "dpcurator_fraction_add_v1"
AT_MOST = "dpcurator_fraction_at_most_v1"
RESERVE = "dpcurator_reserve_v2"
REPLAYED = "dpcurator_reserve_replayed_v1"

_PARSE = """
    {x}n numeric := split_part({x}, '/', 1);
    {x}d numeric := COALESCE(NULLIF(split_part({x}, '/', 2), ''), '1');"""

# PL/pgSQL rather than SQL functions: PL/pgSQL plans their statements once per session, while a
# SQL function called from PL/pgSQL is planned again in every transaction.
#: The reservation functions' first step: lock the dataset row into ``ds`` (none: return no row).
_LOCK_DATASET = """\
    -- Locks in the order used everywhere: the dataset row, then the grant row.
    SELECT d.cap_epsilon::text AS cap_epsilon, d.cap_delta::text AS cap_delta,
           d.spent_epsilon::text AS spent_epsilon, d.spent_delta::text AS spent_delta INTO ds
        FROM datasets AS d WHERE d.id = p_dataset FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;  -- no row: unknown dataset
    END IF;"""

#: Their second, when the grant is charged: lock the grant row into ``gr`` (none: no row).
_LOCK_GRANT = """\
        SELECT g.budget_epsilon::text AS budget_epsilon, g.budget_delta::text AS budget_delta,
               g.spent_epsilon::text AS spent_epsilon, g.spent_delta::text AS spent_delta INTO gr
            FROM grants AS g
            WHERE g.principal_id = p_principal AND g.dataset_id = p_dataset FOR UPDATE;
        IF NOT FOUND THEN
            RETURN;  -- no row: no grant
        END IF;"""

#: Their last: the charge, reserved, its id into ``new_id``.
_INSERT_CHARGE = """\
    INSERT INTO charges (principal_id, dataset_id, kind, request_key, fingerprint, query_text,
                         epsilon, delta, events, status, claimed_by, created_at)
        VALUES (p_principal, p_dataset, p_kind, NULL, p_fingerprint, p_query_text, p_epsilon,
                p_delta, p_events, 'reserved', p_claimed_by, p_created_at)
        RETURNING id INTO new_id;"""

_FUNCTIONS = [
    f"""
CREATE FUNCTION {ADD}(a text, b text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE {_PARSE.format(x="a")} {_PARSE.format(x="b")}
    n numeric := an * bd + bn * ad;
    d numeric := ad * bd;
    common numeric := gcd(n, d);
BEGIN
    n := div(n, common);
    d := div(d, common);
    IF d = 1 THEN
        RETURN n::text;
    END IF;
    RETURN n::text || '/' || d::text;
END
$$""",
    f"""
CREATE FUNCTION {AT_MOST}(a text, b text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE {_PARSE.format(x="a")} {_PARSE.format(x="b")}
BEGIN
    RETURN an * bd <= bn * ad;
END
$$""",
    f"""
CREATE FUNCTION {RESERVE}(
    p_dataset text, p_principal text, p_charge_grant boolean, p_epsilon text, p_delta text,
    p_kind text, p_fingerprint text, p_query_text text, p_events json, p_claimed_by text,
    p_created_at timestamp
) RETURNS TABLE (
    charge_id integer,
    cap_epsilon text, cap_delta text, spent_epsilon text, spent_delta text,
    grant_budget_epsilon text, grant_budget_delta text,
    grant_spent_epsilon text, grant_spent_delta text
)
LANGUAGE plpgsql AS $$
DECLARE
    ds record;
    gr record;
    new_id integer;
    ds_epsilon text;
    ds_delta text;
    gr_epsilon text;
    gr_delta text;
BEGIN
{_LOCK_DATASET}
    IF EXISTS (SELECT 1 FROM budget_accounts AS a WHERE a.dataset_id = p_dataset
               AND a.principal_id IN ('', p_principal)) THEN
        RETURN QUERY SELECT -1, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text,
            NULL::text, NULL::text, NULL::text;
        RETURN;  -- a concentrated budget: the caller replays its events in a transaction
    END IF;
    IF p_charge_grant THEN
{_LOCK_GRANT}
    ELSE
        SELECT NULL::text AS budget_epsilon, NULL::text AS budget_delta,
               NULL::text AS spent_epsilon, NULL::text AS spent_delta INTO gr;
    END IF;
    ds_epsilon := {ADD}(ds.spent_epsilon, p_epsilon);
    ds_delta := {ADD}(ds.spent_delta, p_delta);
    gr_epsilon := {ADD}(gr.spent_epsilon, p_epsilon);  -- NULL without a grant (STRICT)
    gr_delta := {ADD}(gr.spent_delta, p_delta);
    IF NOT ({AT_MOST}(ds_epsilon, ds.cap_epsilon) AND {AT_MOST}(ds_delta, ds.cap_delta))
       OR (p_charge_grant AND NOT ({AT_MOST}(gr_epsilon, gr.budget_epsilon)
                                   AND {AT_MOST}(gr_delta, gr.budget_delta)))
    THEN  -- refused: no charge id; the caller words the refusal from the totals
        RETURN QUERY SELECT NULL::integer, ds.cap_epsilon, ds.cap_delta, ds.spent_epsilon,
            ds.spent_delta, gr.budget_epsilon, gr.budget_delta, gr.spent_epsilon,
            gr.spent_delta;
        RETURN;
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);  -- this transaction only
    IF p_charge_grant THEN
        UPDATE grants AS g
            SET spent_epsilon = gr_epsilon, spent_delta = gr_delta
            WHERE g.principal_id = p_principal AND g.dataset_id = p_dataset;
    END IF;
    UPDATE datasets AS d
        SET spent_epsilon = ds_epsilon, spent_delta = ds_delta
        WHERE d.id = p_dataset;
{_INSERT_CHARGE}
    RETURN QUERY SELECT new_id, ds.cap_epsilon, ds.cap_delta, ds.spent_epsilon, ds.spent_delta,
        gr.budget_epsilon, gr.budget_delta, gr.spent_epsilon, gr.spent_delta;
END
$$""",
    f"""
CREATE FUNCTION {REPLAYED}(
    p_dataset text, p_principal text, p_charge_grant boolean, p_epsilon text, p_delta text,
    p_kind text, p_fingerprint text, p_query_text text, p_events json, p_claimed_by text,
    p_created_at timestamp, p_budgets text[], p_last bigint[], p_counted bigint[]
) RETURNS TABLE (charge_id integer, budgets text[])
LANGUAGE plpgsql AS $$
DECLARE
    ds record;
    gr record;
    state text[];
    counted bigint[];
    new_id integer;
BEGIN
{_LOCK_DATASET}
    SELECT NULL::text AS budget_epsilon, NULL::text AS budget_delta,
           NULL::text AS spent_epsilon, NULL::text AS spent_delta INTO gr;
    IF p_charge_grant THEN
{_LOCK_GRANT}
    END IF;
    -- The budgets as they are: the cap's (ε, δ) and account (NULL: none; '' : an (ε, δ)
    -- account; else its ρ), then the grant's (the cap's alone for an owner).
    state := ARRAY[ds.cap_epsilon, ds.cap_delta, (
        SELECT COALESCE(a.rho, '') FROM budget_accounts AS a
        WHERE a.dataset_id = p_dataset AND a.principal_id = '')];
    IF p_charge_grant THEN
        state := state || ARRAY[gr.budget_epsilon, gr.budget_delta, (
            SELECT COALESCE(a.rho, '') FROM budget_accounts AS a
            WHERE a.dataset_id = p_dataset AND a.principal_id = p_principal)];
    END IF;
    -- Each budget's charges (not replays) up to the caller's last one read, its cancelled
    -- charges among them, and its charges after it: the cap's, then the grant's (one scan).
    SELECT ARRAY[count(*) FILTER (WHERE c.id <= p_last[1]),
                 count(*) FILTER (WHERE c.id <= p_last[1] AND c.status = 'cancelled'),
                 count(*) FILTER (WHERE c.id > p_last[1]),
                 count(*) FILTER (WHERE c.principal_id = p_principal AND c.id <= p_last[2]),
                 count(*) FILTER (WHERE c.principal_id = p_principal AND c.id <= p_last[2]
                                  AND c.status = 'cancelled'),
                 count(*) FILTER (WHERE c.principal_id = p_principal AND c.id > p_last[2])]
        INTO counted
        FROM charges AS c WHERE c.dataset_id = p_dataset AND c.kind <> 'replay';
    IF NOT p_charge_grant THEN
        counted := counted[1:3];
    END IF;
    IF state IS DISTINCT FROM p_budgets OR counted IS DISTINCT FROM p_counted THEN
        -- Not what the caller admitted the event against: nothing done; the budgets as they are.
        RETURN QUERY SELECT NULL::integer, state;
        RETURN;
    END IF;
    PERFORM set_config('synchronous_commit', 'off', true);  -- this transaction only
    IF p_charge_grant THEN  -- the (ε, δ) sums, kept for the record
        UPDATE grants AS g
            SET spent_epsilon = {ADD}(gr.spent_epsilon, p_epsilon),
                spent_delta = {ADD}(gr.spent_delta, p_delta)
            WHERE g.principal_id = p_principal AND g.dataset_id = p_dataset;
    END IF;
    UPDATE datasets AS d
        SET spent_epsilon = {ADD}(ds.spent_epsilon, p_epsilon),
            spent_delta = {ADD}(ds.spent_delta, p_delta)
        WHERE d.id = p_dataset;
{_INSERT_CHARGE}
    RETURN QUERY SELECT new_id, state;
END
$$""",
]

#: One reservation, given the new charge's row (``Ledger._charge_row``, events as JSON text) and
#: ``charge_grant``: the locked totals BEFORE it and the new charge's id (NULL if refused; -1,
#: nothing done, if the cap or the grant is concentrated: see
#: :mod:`dpcurator.service.ledger.accounts`); no row if the dataset is unknown or the analyst has
#: no grant on it.
RESERVE_CALL = text(
    f"SELECT * FROM {RESERVE}(:dataset_id, :principal_id, :charge_grant, :epsilon, :delta, :kind,"
    " :fingerprint, :query_text, CAST(:events AS json), :claimed_by, :created_at)"
)

#: A reservation on concentrated budgets whose replays the caller read beforehand (see
#: :mod:`dpcurator.service.ledger.replayed`): the new charge's row as for :data:`RESERVE_CALL`,
#: the ``budgets`` the caller admitted the event against (the cap's ε, δ and account, then the
#: grant's), the ``last`` charge id each budget's replay read, and what the replays ``counted``
#: (per budget: its charges and its cancelled charges up to that id, and 0 charges after it).
#: The new charge's id (NULL, nothing done, if the budgets or the counts are not those) and the
#: budgets as they are; no row for an unknown dataset or a missing grant.
REPLAYED_CALL = text(
    f"SELECT * FROM {REPLAYED}(:dataset_id, :principal_id, :charge_grant, :epsilon, :delta,"
    " :kind, :fingerprint, :query_text, CAST(:events AS json), :claimed_by, :created_at,"
    " CAST(:budgets AS text[]),"
    " CAST(:last AS bigint[]), CAST(:counted AS bigint[]))"
)

#: Whether a function of that name is on the connection's search path (where calls look).
_EXISTS = "SELECT 1 FROM pg_proc WHERE proname = :name AND pg_function_is_visible(oid)"


def install(engine: Engine) -> None:
    """Create the functions unless they exist; concurrent installers queue on an advisory lock."""
    with engine.begin() as conn:
        conn.execute(text("SELECT pg_advisory_xact_lock(hashtext(:name))"), {"name": RESERVE})
        for name, definition in zip((ADD, AT_MOST, RESERVE, REPLAYED), _FUNCTIONS, strict=True):
            exists = conn.execute(text(_EXISTS), {"name": name}).first()
            if exists is None:
                conn.exec_driver_sql(definition)
