"""An independent encoding of the Linux core QP transition table, for checking models/table.py.

Transcribed from the research notes on `qp_state_table` / `ib_modify_qp_is_ok()` in
linux drivers/infiniband/core/verbs.c (findings.md section 1), NOT from models/table.py,
and written in a different notation so that a slip in one is unlikely to be repeated in
the other. Deliberately imports nothing from `models`.

Notation, one statement per line:
    CUR->NEXT                                   the pair is valid (nothing required or optional)
    CUR->NEXT req TYPE[,TYPE...]: BIT BIT ...   required bits for those types
    CUR->NEXT opt TYPE[,TYPE...]: BIT BIT ...   optional bits for those types
Types and bits use the kernel's spelling (XRC_INI, XRC_TGT) and short names; a valid pair
holds for every QP type, types not named get nothing. SMI/GSI are kernel-only: left out.
"""

#: Short names (as in the notes) -> IBV_QP_<NAME> of rdma-core's enum ibv_qp_attr_mask.
BIT_NAMES = {
    "CUR": "CUR_STATE",
    "NOTIFY": "EN_SQD_ASYNC_NOTIFY",
    "ACC": "ACCESS_FLAGS",
    "PKEY": "PKEY_INDEX",
    "PORT": "PORT",
    "QKEY": "QKEY",
    "AV": "AV",
    "MTU": "PATH_MTU",
    "TMO": "TIMEOUT",
    "RETRY": "RETRY_CNT",
    "RNR": "RNR_RETRY",
    "RQ_PSN": "RQ_PSN",
    "RD": "MAX_QP_RD_ATOMIC",
    "ALT": "ALT_PATH",
    "MINRNR": "MIN_RNR_TIMER",
    "SQ_PSN": "SQ_PSN",
    "DRD": "MAX_DEST_RD_ATOMIC",
    "MIG": "PATH_MIG_STATE",
    "DQPN": "DEST_QPN",
    "RATE_LIMIT": "RATE_LIMIT",
}

#: Kernel ib_qp_type names -> the user-visible ibv_qp_type names the model uses.
TYPE_NAMES = {
    "RC": "RC",
    "UC": "UC",
    "UD": "UD",
    "RAW": "RAW_PACKET",
    "XRC_INI": "XRC_SEND",
    "XRC_TGT": "XRC_RECV",
}

QP_TYPES = tuple(TYPE_NAMES.values())
STATES = ("RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR")

KERNEL_TABLE_TEXT = """
RESET->RESET
RESET->INIT  req UD: PKEY PORT QKEY
RESET->INIT  req RAW: PORT
RESET->INIT  req UC,RC,XRC_INI,XRC_TGT: PKEY PORT ACC

INIT->RESET
INIT->ERR
INIT->INIT   opt UD: PKEY PORT QKEY
INIT->INIT   opt UC,RC,XRC_INI,XRC_TGT: PKEY PORT ACC
INIT->RTR    req UC,XRC_INI: AV MTU DQPN RQ_PSN
INIT->RTR    req RC,XRC_TGT: AV MTU DQPN RQ_PSN DRD MINRNR
INIT->RTR    opt UD: PKEY QKEY
INIT->RTR    opt UC,RC,XRC_INI,XRC_TGT: ALT ACC PKEY

RTR->RESET
RTR->ERR
RTR->RTS     req UD,UC: SQ_PSN
RTR->RTS     req RC,XRC_INI: TMO RETRY RNR SQ_PSN RD
RTR->RTS     req XRC_TGT: TMO SQ_PSN
RTR->RTS     opt UD: CUR QKEY
RTR->RTS     opt UC,XRC_INI: CUR ALT ACC MIG
RTR->RTS     opt RC,XRC_TGT: CUR ALT ACC MINRNR MIG
RTR->RTS     opt RAW: RATE_LIMIT

RTS->RESET
RTS->ERR
RTS->RTS     opt UD: CUR QKEY
RTS->RTS     opt UC,XRC_INI: CUR ACC ALT MIG
RTS->RTS     opt RC,XRC_TGT: CUR ACC ALT MIG MINRNR
RTS->RTS     opt RAW: RATE_LIMIT
RTS->SQD     opt UD,UC,RC,XRC_INI,XRC_TGT: NOTIFY

SQD->RESET
SQD->ERR
SQD->RTS     opt UD: CUR QKEY
SQD->RTS     opt UC,XRC_INI: CUR ALT ACC MIG
SQD->RTS     opt RC,XRC_TGT: CUR ALT ACC MINRNR MIG
SQD->SQD     opt UD: PKEY QKEY
SQD->SQD     opt UC: AV ALT ACC PKEY MIG
SQD->SQD     opt RC: PORT AV TMO RETRY RNR RD DRD ALT ACC PKEY MINRNR MIG
SQD->SQD     opt XRC_INI: PORT AV TMO RETRY RNR RD ALT ACC PKEY MIG
SQD->SQD     opt XRC_TGT: PORT AV TMO DRD ALT ACC PKEY MINRNR MIG

SQE->RESET
SQE->ERR
SQE->RTS     opt UD: CUR QKEY
SQE->RTS     opt UC: CUR ACC

ERR->RESET
ERR->ERR
"""

Table = dict[str, dict[str, dict[str, dict[str, list[str]]]]]


def parse(text: str = KERNEL_TABLE_TEXT) -> Table:
    """{qp_type: {cur: {next: {"required": [...], "optional": [...]}}}}, names sorted."""
    sets: dict[tuple[str, str, str], dict[str, set[str]]] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        pair, _, rest = line.partition(" ")
        cur, arrow, nxt = pair.partition("->")
        if not arrow or cur not in STATES or nxt not in STATES:
            raise ValueError(f"line {lineno}: bad pair {pair!r}")
        for qp_type in QP_TYPES:
            sets.setdefault((qp_type, cur, nxt), {"required": set(), "optional": set()})
        rest = rest.strip()
        if not rest:
            continue
        kind, _, spec = rest.partition(" ")
        types, colon, bits = spec.partition(":")
        if kind not in ("req", "opt") or not colon:
            raise ValueError(f"line {lineno}: expected 'req|opt TYPES: BITS', got {rest!r}")
        key = "required" if kind == "req" else "optional"
        for t in types.split(","):
            bucket = sets[(TYPE_NAMES[t.strip()], cur, nxt)][key]
            for bit in bits.split():
                if BIT_NAMES[bit] in bucket:
                    raise ValueError(f"line {lineno}: {bit} given twice")
                bucket.add(BIT_NAMES[bit])
    out: Table = {qp_type: {} for qp_type in QP_TYPES}
    for (qp_type, cur, nxt), entry in sets.items():
        out[qp_type].setdefault(cur, {})[nxt] = {k: sorted(v) for k, v in entry.items()}
    return out


LINUX: Table = parse()


def entry(qp_type: str, cur: str, nxt: str) -> dict[str, list[str]] | None:
    """The independent entry for one transition, or None when the pair is invalid."""
    return LINUX[qp_type].get(cur, {}).get(nxt)
