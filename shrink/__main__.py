from shrink.cli import main

main()
