from workers.science.cli import main

raise SystemExit(main())
