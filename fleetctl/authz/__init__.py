"""Who may do what: roles per fleet, the command -> role table, the decision, and the front
door that enforces them (docs/authorization.md, decision 16).

    roles            Role (viewer < operator < admin); the roles file the admin keeps     (pure)
    commands         every CLI command: read, write (and the role it needs), or process   (pure)
    decide           authorize(): allowed or denied, why, and the actor recorded          (pure)
    identity_client  the subject of a verified client certificate or OIDC token
    api_server       the front door: authenticate, authorize, audit, run as the subject
    api_client       the CLI's request to the front door
    gateway          which Temporal gRPC methods each role may call (nginx maps)     (pure)
    pg_roles         the PostgreSQL group roles and their grants                      (pure)

May import: checks, fleetctl.db (the audit trail), fleetctl.cli.remote (the server resolves a
command line as the CLI does). Entry point: `decide.authorize`.
"""
