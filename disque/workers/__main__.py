from disque.workers.process import main

main()
