from plugdrop.cli import main

raise SystemExit(main())
