from snapshotd.cli.main import main

raise SystemExit(main())
