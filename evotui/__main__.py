from evotui.cli import main

raise SystemExit(main())
