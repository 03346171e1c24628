"""engram's web app: the timeline, search, people, memories, activity and connect screens over the service layer
(``api.service``), server-rendered (``api.ui.app.create_ui``); ``engram ui`` serves it on the embedded default."""
