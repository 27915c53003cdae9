"""Chat: `generate`, conversations (`dragon.chat`), and the feedback they collect. (Not named
`chat/`: `dragonfarm_core.chat` is the public function.)"""
