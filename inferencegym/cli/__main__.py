from inferencegym.cli import main

main()
