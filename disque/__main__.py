from disque.server import main

main()
