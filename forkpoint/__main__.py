from forkpoint.cli import main

main()
