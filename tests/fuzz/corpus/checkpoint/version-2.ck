dptrain-checkpoint 2
