from examples.spa.app import main

main()
