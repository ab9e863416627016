import sys

from colab_resume.cli import main

sys.exit(main())
