"""The issue-tracker bot: answers a bug report on GitHub or GitLab with a diagnosis.

    triage bot github --event "$GITHUB_EVENT_PATH"     # a GitHub Action (action.yml)
    triage bot gitlab --event "$TRIGGER_PAYLOAD"       # a GitLab CI job
    triage serve --port 8080 --config bot.yaml         # webhooks of both

Modules, in the order a delivery meets them:

| module | concern |
|---|---|
| `service` | the webhook server: size, signature, replay, allow-list, bounded queue, health |
| `ci` | one event file from CI |
| `github`, `gitlab` | the adapters: event payload -> `Request`, and the tracker's REST calls |
| `core` | tracker-neutral: whom to answer, the bot's own comment, extract -> diagnose -> post |
| `extract`, `fetch` | evidence in the thread (code blocks, `<details>`, pastes), attached logs |
| `comment` | the comment: the Markdown report plus marker, duplicates, evidence to add, labels |
| `settings` | `bot.yaml` (the service) and `.github/triage.yml` (each repository) |
| `rest` | JSON over urllib, with the trackers' rate-limit rules |
"""
