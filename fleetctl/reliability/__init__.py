"""The fleet's figures: MTTF, MTTR, availability, ETTR, rule precision, lemons, stragglers;
the report and the Prometheus exporter.

    metrics          the math, on plain records                                      (pure)
    report           the report assembled from loaded records, and its HTML           (pure)
    svg              the report's charts                                              (pure)
    metrics_store    node events, jobs, restarts, check runs as metrics' records     (edge)
    report_store     the report over a window, from the database                     (edge)
    automation_shadow  what automation would have done in a dry run, beside what did  (pure)
    automation_shadow_store  the shadow run's records, from the database              (edge)
    exporter_server  the Prometheus exporter, read from the database on each scrape  (edge)
    templates/       the report's HTML; grafana-dashboard.json, the dashboard on the exporter

May import: every other domain's decisions, checks; the edges also fleetctl.db. Entry point:
`report_store.build_report`.
"""
