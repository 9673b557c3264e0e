"""The comparison engine: the model against a device, step by step. The heart of qpconform.

No pyverbs here (devices are reached through `device`), no pytest (the plugin in
fixtures/ builds rule sets and hands them to the suites). The map:

    device.py   the device protocol: Device / QPHandle (lone QPs), PairDevice /
                PairEnd (connected pairs), and what is observed (VerbResult,
                Completion, AsyncEvent, QueryResult, Created)
    ledger.py   per QP: what is due, required, forbidden, never to run or kept
                (a receive a dropped datagram met), each with the rule and step
                behind it; one classification of every completion
    track.py    Track: one QP under comparison (handle, model, ledger, step log,
                owed windows, history)
    core.py     Engine: the state every part shares and the hooks a rule set
                overrides; it composes the parts below (rule_set.py: what they
                ask of it)
    steplog.py  StepLog (engine.log): the step logs, settle steps, run-record steps
                and choices
    delivery_windows.py  DeliveryWindows (engine.windows): the quiet windows a step
                opens, widened by the run's deliveries
    matching.py  Matcher (engine.match): completions and events against the ledger,
                what never came
    watch.py    Watch (engine.watch): polls and bounded waits on every tracked QP
    verdict.py  Verdict (engine.verdict): conclude a verb, hazards, choices under "may"
                rules, following a quirked device
    records.py  the engine's record: Divergence (frozen, to/from JSON), the DivergenceSink
                a caller passes (a run's: reports/divergence.py DivergenceStore),
                DivergenceList (in memory)
    judge.py    known or unknown: quirks, sink, run recorder, DivergenceError
    quirks.py   a run's quirk profile and how a quirk matches a divergence;
                quirk_schema.py: the profile format and its parser
    hazards.py  verbs a known driver bug turns into a crash: not sent (HazardAvoided)
    text.py     the words of every record (masks, errnos, expectations)
    lone.py     rule set for QPs without a peer: Checker / CheckedQP (the sweeps,
                qpconform/machines/lone.py's QPMachine); its parts: retiring.py (the
                QPs open and retired, the watch that reaps them), read_back.py (what
                query_qp reads back), qp_values.py (valid values, the walk to a state)
    returned.py  the lone QP's returned values: create_qp's written-back caps, its
                CQs' cqe, query_qp's caps and cur_qp_state (models/returned.py)
    pair.py     rule set for connected pairs and the wire: PairHarness (the
                traffic suites, the traffic machine), the engine hooks it overrides,
                and the parts it composes; connect.py: bring-up values
    pair_post.py  Posting (harness.post): sends, receives, SRQ receives and the
                inline cap, each booked on the wire
    pair_life.py  Lifecycle (harness.lifecycle): connect, bring-up, reset,
                destroy and re-create an end, resync after a reconnect
    pair_wire.py  WireSteps (harness.wire): run the model's wire steps and book
                what each one makes due on both ends
    pair_judgement.py  CompletionJudgement (harness.judgement): "may" choices read
                from a completion (byte_len, status) and fills a WR may carry
    pair_parked.py  ParkedPair (harness.parkable): a pair still observed after its
                example ended
    pair_follow.py  PairFollowing (harness.follow): the ends' states against the
                model, and how it follows a device a quirk covers (drains ended early
                or late, sends that wait for the doorbell)
    srq_sizes.py  SrqSizes (harness.srq_sizes): create_srq's write-back, query_srq's
                sizes and limit, the resize (models/srq_sizes.py)
    shared_cq.py  SharedCQ (harness.shared): bystander QPs on an end's CQs and the
                routing of every completion by qp_num (several QPs on one CQ)
    too_long.py  TooLongChoice (harness.too_long): a UC/UD message longer than the
                receive, the device's choice learnt and then held
    memory.py   MemoryGuards (harness.memory): the target MRs' bytes and guard bands
                against models/access.py after every settle and quiet window

models/ says what must happen (never imports the engine); reports/ turns the
engine's records into reports; qpconform/adapters/ implements the device protocol
on real NICs (pyverbs, rdma_cm); qpconform/machines/ holds the state machines that
drive the rule sets; fixtures/ is the pytest plugin. The engine imports only models/
(import-linter checks it: pyproject.toml): it writes no file and reads no
environment, so where records and reproducers go and which test runs are the
caller's to pass (fixtures/device_fixtures.py does it for a device run).
"""
