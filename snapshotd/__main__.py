from snapshotd.cli import main

raise SystemExit(main())
