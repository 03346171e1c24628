"""The producers on a person's own machine: the capture agent (``agent``: the screen, frame by frame, and with
``--microphone`` the ``microphone``) and the folder watcher (``watch``: files as they settle). Each publishes into
the embedded store or, with ``--api``, into a cluster; none imports the pipeline at module level."""
