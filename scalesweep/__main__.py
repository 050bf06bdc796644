from scalesweep.orchestrator.cli import main

raise SystemExit(main())
