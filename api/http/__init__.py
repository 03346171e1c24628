"""The HTTP front door: the FastAPI app (``app.create_app``), its routers by resource (``routes/``), bound uploads
(``uploads``), API keys per tenant (``keys``) and per-key rate limits (``ratelimit``). It serves the service layer
(``api.service``) in the distributed mode; the web app (``api.ui``) mounts under it at ``/ui``."""
