from opdweb_client.cli import main

raise SystemExit(main())
